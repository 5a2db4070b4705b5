package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/berth-go/berth/transport"
)

// Observer is a transport.Observer that records the receive pipeline's
// events as OpenTelemetry metrics and a consumer span per message. Set it as
// PipelineConfig.Observer of any transport's subscriber config. It is safe
// for concurrent use and may be shared by many subscribers.
type Observer struct {
	cfg    Config
	tracer trace.Tracer
	system attribute.KeyValue

	consumed     metric.Int64Counter
	settled      metric.Int64Counter
	deadLettered metric.Int64Counter
	processDur   metric.Float64Histogram
	endToEnd     metric.Float64Histogram
	waves        metric.Int64Counter
	probes       metric.Int64Counter
	waveSize     metric.Int64Histogram
	faults       metric.Int64Counter
	rebuilds     metric.Int64Counter

	listeners sync.Map // listener name → *listenerAttrs
}

var _ transport.Observer = (*Observer)(nil)

// NewObserver returns an Observer with its instruments created from
// cfg.MeterProvider.
func NewObserver(cfg Config) (*Observer, error) {
	cfg = cfg.withDefaults()
	o := &Observer{
		cfg:    cfg,
		tracer: cfg.tracer(),
		system: keySystem.String(cfg.System),
	}
	m := cfg.meter()
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	seconds := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	o.consumed = counter(MetricConsumedMessages, "{message}", "Number of messages claimed from the broker.")
	o.settled = counter(MetricSettledMessages, "{message}", "Number of delivered messages settled, by outcome.")
	o.deadLettered = counter(MetricDeadLettered, "{message}", "Number of messages moved to the dead-letter destination.")
	o.processDur = seconds(MetricProcessDuration, "Duration of processing operation: from delivery to the handler until ack or nack.", durationBuckets)
	o.endToEnd = seconds(MetricEndToEnd, "Time from publish to ack.", endToEndBuckets)
	o.waves = counter(MetricReceiveWaves, "{wave}", "Number of receive waves, by result.")
	o.probes = counter(MetricReceiveProbes, "{probe}", "Number of receive probes (receive requests, or rows asked for by a SQL claim), by result.")
	var err error
	o.waveSize, err = m.Int64Histogram(MetricWaveSize, metric.WithUnit("{probe}"),
		metric.WithDescription("Number of probes launched per receive wave."),
		metric.WithExplicitBucketBoundaries(waveSizeBuckets...))
	errs = append(errs, err)
	o.faults = counter(MetricFaults, "{fault}", "Number of terminal receiver faults, by stage.")
	o.rebuilds = counter(MetricRebuilds, "{rebuild}", "Number of receivers rebuilt after a fault.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("telemetry: creating instruments: %w", err)
	}
	return o, nil
}

// outcomes are the transport.Outcome values, by index.
var outcomes = [...]transport.Outcome{
	transport.OutcomeAcked, transport.OutcomeNacked,
	transport.OutcomeDeadLettered, transport.OutcomeAbandoned,
}

// listenerAttrs holds one listener's precomputed attribute sets, so that
// the hot path does not build or sort attributes.
type listenerAttrs struct {
	spanName      string
	startOpts     []trace.SpanStartOption // consumer kind, fixed attributes
	startOptsRoot []trace.SpanStartOption // the same, with a new root
	consumed      metric.MeasurementOption
	settled       [len(outcomes)]metric.MeasurementOption
	process       [len(outcomes)]metric.MeasurementOption
	endToEnd      metric.MeasurementOption
	dlExhausted   metric.MeasurementOption
	dlUnmappable  metric.MeasurementOption
	wavesMessages metric.MeasurementOption
	wavesEmpty    metric.MeasurementOption
	wavesError    metric.MeasurementOption
	probesFound   metric.MeasurementOption
	probesEmpty   metric.MeasurementOption
	base          metric.MeasurementOption
}

func set(kvs ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(kvs...))
}

func (o *Observer) attrs(listener string) *listenerAttrs {
	if la, ok := o.listeners.Load(listener); ok {
		return la.(*listenerAttrs)
	}
	dest := keyDestination.String(listener)
	fixed := trace.WithAttributes(o.system, dest,
		semconv.MessagingOperationTypeProcess, keyOperationName.String("process"))
	kind := trace.WithSpanKind(trace.SpanKindConsumer)
	la := &listenerAttrs{
		spanName:      "process " + listener,
		startOpts:     []trace.SpanStartOption{kind, fixed},
		startOptsRoot: []trace.SpanStartOption{kind, fixed, trace.WithNewRoot()},
		consumed:      set(o.system, dest, keyOperationName.String("receive")),
		endToEnd:      set(o.system, dest),
		dlExhausted:   set(o.system, dest, AttrDeadLetterCause.String("attempts_exhausted")),
		dlUnmappable:  set(o.system, dest, AttrDeadLetterCause.String("unmappable")),
		wavesMessages: set(o.system, dest, AttrResult.String("messages")),
		wavesEmpty:    set(o.system, dest, AttrResult.String("empty")),
		wavesError:    set(o.system, dest, AttrResult.String("error")),
		probesFound:   set(o.system, dest, AttrResult.String("found")),
		probesEmpty:   set(o.system, dest, AttrResult.String("empty")),
		base:          set(o.system, dest),
	}
	for i, out := range outcomes {
		outcome := AttrOutcome.String(out.String())
		la.settled[i] = set(o.system, dest, outcome)
		kvs := []attribute.KeyValue{o.system, dest, keyOperationName.String("process"), outcome}
		if failed(out) {
			kvs = append(kvs, keyErrorType.String(out.String()))
		}
		la.process[i] = set(kvs...)
	}
	actual, _ := o.listeners.LoadOrStore(listener, la)
	return actual.(*listenerAttrs)
}

// failed reports whether an outcome is a processing failure.
func failed(out transport.Outcome) bool {
	return out == transport.OutcomeNacked || out == transport.OutcomeDeadLettered
}

// WaveDone implements transport.Observer: it counts the wave by result,
// its probes, its size, and the deliveries it claimed.
func (o *Observer) WaveDone(listener string, launched, found, claimed int, err error) {
	ctx := context.Background()
	la := o.attrs(listener)
	switch {
	case err != nil:
		o.waves.Add(ctx, 1, la.wavesError)
	case claimed > 0:
		o.waves.Add(ctx, 1, la.wavesMessages)
	default:
		o.waves.Add(ctx, 1, la.wavesEmpty)
	}
	if launched > 0 {
		o.waveSize.Record(ctx, int64(launched), la.base)
		if found > 0 {
			o.probes.Add(ctx, int64(found), la.probesFound)
		}
		if empty := launched - found; empty > 0 {
			o.probes.Add(ctx, int64(empty), la.probesEmpty)
		}
	}
	if claimed > 0 {
		o.consumed.Add(ctx, int64(claimed), la.consumed)
	}
}

// destinationKey carries the listener name in a message context, for
// StartBatchSpan.
type destinationKey struct{}

// Delivering implements transport.Observer: it extracts the producer's trace
// context from the message metadata and starts a consumer "process" span,
// its child (or, with Config.Link, a new root linked to it; without a
// producer context, a new root). The returned
// context carries the span; finish ends it and records the settlement
// metrics.
func (o *Observer) Delivering(ctx context.Context, listener string, msg *message.Message) (context.Context, func(transport.Outcome)) {
	start := time.Now()
	la := o.attrs(listener)
	carrier := propagation.MapCarrier(msg.Metadata)
	prop := o.cfg.propagator()
	publishedAt, hasPublishedAt := transport.PublishedAt(msg)

	// Options that do not depend on the message are built once per
	// listener; per-message attributes are added only to a recording span.
	opts := la.startOpts
	if o.cfg.Link {
		opts = la.startOptsRoot
		producer := trace.SpanContextFromContext(prop.Extract(context.Background(), carrier))
		if producer.IsValid() {
			opts = append(opts[:len(opts):len(opts)], trace.WithLinks(trace.Link{SpanContext: producer}))
		}
	} else {
		ctx = prop.Extract(ctx, carrier)
		if !trace.SpanContextFromContext(ctx).IsRemote() {
			// No producer context: a root span, not a child of whatever
			// span the Subscribe context carried.
			opts = la.startOptsRoot
		}
	}
	ctx = context.WithValue(ctx, destinationKey{}, listener)
	ctx, span := o.tracer.Start(ctx, la.spanName, opts...)
	if span.IsRecording() {
		span.SetAttributes(o.messageAttrs(msg)...)
	}

	return ctx, func(out transport.Outcome) {
		end := time.Now()
		i := int(out)
		if i >= 0 && i < len(outcomes) {
			o.settled.Add(ctx, 1, la.settled[i])
			o.processDur.Record(ctx, end.Sub(start).Seconds(), la.process[i])
		}
		if out == transport.OutcomeAcked && hasPublishedAt {
			o.endToEnd.Record(ctx, max(end.Sub(publishedAt).Seconds(), 0), la.endToEnd)
		}
		if span.IsRecording() {
			span.SetAttributes(AttrOutcome.String(out.String()))
			if failed(out) {
				span.SetAttributes(keyErrorType.String(out.String()))
				span.SetStatus(codes.Error, out.String())
			}
		}
		span.End()
	}
}

// messageAttrs returns a consumer span's per-message attributes.
func (o *Observer) messageAttrs(msg *message.Message) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, keyMessageID.String(msg.UUID), keyBodySize.Int(len(msg.Payload)))
	if o.cfg.CorrelationIDKey != "" {
		if v := msg.Metadata.Get(o.cfg.CorrelationIDKey); v != "" {
			attrs = append(attrs, keyConversationID.String(v))
		}
	}
	if v := msg.Metadata.Get(transport.MetadataAttempt); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			attrs = append(attrs, AttrAttempt.Int(n))
		}
	}
	if v := msg.Metadata.Get(transport.MetadataMessageID); v != "" {
		attrs = append(attrs, AttrDeliveryID.String(v))
	}
	return attrs
}

// DeadLettered implements transport.Observer: it counts the message by
// cause and adds a berth.dead_lettered event, with the reason, to its
// consumer span.
func (o *Observer) DeadLettered(listener string, msg *message.Message, reason string) {
	la := o.attrs(listener)
	if msg == nil {
		o.deadLettered.Add(context.Background(), 1, la.dlUnmappable)
		return
	}
	ctx := msg.Context()
	o.deadLettered.Add(ctx, 1, la.dlExhausted)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("berth.dead_lettered", trace.WithAttributes(attribute.String("berth.dead_letter.reason", reason)))
	}
}

// Faulted implements transport.Observer: it counts the fault by stage.
func (o *Observer) Faulted(listener string, f *transport.Fault) {
	stage := "unknown"
	if f != nil && f.Stage != "" {
		stage = f.Stage
	}
	o.faults.Add(context.Background(), 1, metric.WithAttributes(o.system, keyDestination.String(listener), AttrFaultStage.String(stage)))
}

// Rebuilt implements transport.Observer: it counts the rebuild.
func (o *Observer) Rebuilt(listener string) {
	o.rebuilds.Add(context.Background(), 1, o.attrs(listener).base)
}

// Received implements transport.Observer; it records nothing yet.
func (o *Observer) Received(string, time.Time, int, error) {}

// Settled implements transport.Observer; it records nothing yet.
func (o *Observer) Settled(string, transport.SettleOp, *message.Message, int, time.Time, error) {}
