package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/berth-go/berth/transport"
)

// RegisterSubscriber registers observable up-down counters that report
// each running listener of sub at every collection: queue count, buffered,
// in flight, batch pending, latched, faulted and status (see
// docs/observability.md). They are up-down counters, not gauges, because
// they add up: summed over listeners or instances they count messages (or
// listeners) in that state.
//
// Each observation carries berth.subscriber = name and the listener's
// Destination: messaging.system (else what sub names as SystemNamer, else
// DefaultSystem), messaging.destination.name (else the listener's name)
// and messaging.consumer.group.name when it has one. A nil meter means the
// global meter provider's meter for ScopeName. Unregister the returned
// registration when the subscriber is closed.
func RegisterSubscriber(meter metric.Meter, name string, sub transport.StateSource) (metric.Registration, error) {
	if sub == nil {
		return nil, fmt.Errorf("telemetry: RegisterSubscriber: %w: sub: required", transport.ErrInvalidConfig)
	}
	meter = meterOrGlobal(meter)
	var errs []error
	upDown := func(name, unit, desc string) metric.Int64ObservableUpDownCounter {
		g, err := meter.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	queue := upDown(MetricQueueCount, "{message}", "Messages the listener holds: buffered + in flight + batch pending.")
	buffered := upDown(MetricBuffered, "{message}", "Claimed messages waiting for a concurrency permit.")
	inFlight := upDown(MetricInFlight, "{message}", "Messages delivered to the handler and not yet settled.")
	pending := upDown(MetricBatchPending, "{message}", "Messages held by batching stages and not yet settled.")
	latched := upDown(MetricLatched, "{listener}", "Listeners whose receive loop back-pressure holds: 1 or 0 per listener.")
	faulted := upDown(MetricFaulted, "{listener}", "Listeners whose receiver is faulted: 1 or 0 per listener.")
	status := upDown(MetricStatus, "{listener}", "Listeners in each status (berth.listener.status): 1 per listener, for its current status.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("telemetry: creating listener instruments: %w", err)
	}
	subAttr := AttrSubscriber.String(name)
	system := Config{}.system(systemOf(sub))
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, s := range sub.ListenerStates() {
			kvs := listenerKVs(subAttr, system, s)
			opt := metric.WithAttributeSet(attribute.NewSet(kvs...))
			o.ObserveInt64(queue, int64(s.QueueCount), opt)
			o.ObserveInt64(buffered, int64(s.Buffered), opt)
			o.ObserveInt64(inFlight, int64(s.InFlight), opt)
			o.ObserveInt64(pending, int64(s.BatchPending), opt)
			o.ObserveInt64(latched, boolInt(s.Latched), opt)
			o.ObserveInt64(faulted, boolInt(s.Faulted), opt)
			o.ObserveInt64(status, 1, metric.WithAttributes(append(kvs, AttrStatus.String(s.Status.String()))...))
		}
		return nil
	}, queue, buffered, inFlight, pending, latched, faulted, status)
	if err != nil {
		return nil, fmt.Errorf("telemetry: registering listener instruments: %w", err)
	}
	return reg, nil
}

// listenerKVs returns the attributes of listener s of subscriber sub,
// whose system is system unless s names its own.
func listenerKVs(sub attribute.KeyValue, system string, s transport.ListenerState) []attribute.KeyValue {
	d := s.Destination
	if d.System == "" {
		d.System = system
	}
	if d.Name == "" {
		d.Name = s.Name
	}
	kvs := make([]attribute.KeyValue, 0, 5)
	kvs = append(kvs, sub, keySystem.String(d.System), keyDestination.String(d.Name))
	if d.ConsumerGroup != "" {
		kvs = append(kvs, keyConsumerGroup.String(d.ConsumerGroup))
	}
	return kvs
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// A RoundTripper counts requests to the broker by operation: SQS API
// requests by API name (ReceiveMessage, DeleteMessageBatch, …), SQL
// statements by kind (claim, complete, …). Counts are cumulative. Sources,
// subscribers and publishers may implement it; RoundTripFunc adapts any
// function, such as (*sqs.RequestCounter).Counts.
type RoundTripper interface {
	RoundTrips() map[string]int64
}

// RoundTripFunc adapts a function to RoundTripper.
type RoundTripFunc func() map[string]int64

// RoundTrips implements RoundTripper.
func (f RoundTripFunc) RoundTrips() map[string]int64 { return f() }

// RegisterRoundTripper registers the observable counter
// berth.client.round_trips, reporting rt's counts at every collection with
// berth.client = name and berth.operation = the operation. A nil meter
// means the global meter provider's meter for ScopeName.
func RegisterRoundTripper(meter metric.Meter, name string, rt RoundTripper) (metric.Registration, error) {
	if rt == nil {
		return nil, fmt.Errorf("telemetry: RegisterRoundTripper: %w: rt: required", transport.ErrInvalidConfig)
	}
	meter = meterOrGlobal(meter)
	c, err := meter.Int64ObservableCounter(MetricRoundTrips, metric.WithUnit("{request}"),
		metric.WithDescription("Requests sent to the broker (SQS API requests, SQL statements), by operation."))
	if err != nil {
		return nil, fmt.Errorf("telemetry: creating round-trip counter: %w", err)
	}
	client := AttrClient.String(name)
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		counts := rt.RoundTrips()
		ops := make([]string, 0, len(counts))
		for op := range counts {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		for _, op := range ops {
			o.ObserveInt64(c, counts[op], metric.WithAttributes(client, AttrOperation.String(op)))
		}
		return nil
	}, c)
	if err != nil {
		return nil, fmt.Errorf("telemetry: registering round-trip counter: %w", err)
	}
	return reg, nil
}

func meterOrGlobal(m metric.Meter) metric.Meter {
	if m != nil {
		return m
	}
	return otel.GetMeterProvider().Meter(ScopeName, metric.WithSchemaURL(schemaURL))
}
