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
// events as OpenTelemetry metrics, a consumer span per message, a client
// span per receive call that claimed messages (or failed) and per
// settlement of a traced message. Set it as receiver.Config.Observer of any
// transport's subscriber config. It is safe for concurrent use and may be
// shared by many subscribers.
//
// It implements transport.ListenerObserver: each listener binds it with
// the transport's Destination, so messaging.system, destination name and
// consumer group come from the transport. Its methods called directly
// (with a listener name, outside a listener) name the destination after
// the listener.
type Observer struct {
	cfg    Config
	tracer trace.Tracer

	consumed     metric.Int64Counter
	settled      metric.Int64Counter
	deadLettered metric.Int64Counter
	processDur   metric.Float64Histogram
	operationDur metric.Float64Histogram
	endToEnd     metric.Float64Histogram
	waves        metric.Int64Counter
	probes       metric.Int64Counter
	waveSize     metric.Int64Histogram
	faults       metric.Int64Counter
	rebuilds     metric.Int64Counter

	listeners sync.Map // listener name → *listenerAttrs, for unbound calls
}

var (
	_ transport.Observer         = (*Observer)(nil)
	_ transport.ListenerObserver = (*Observer)(nil)
)

// NewObserver returns an Observer with its instruments created from
// cfg.MeterProvider.
func NewObserver(cfg Config) (*Observer, error) {
	cfg = cfg.withDefaults()
	o := &Observer{cfg: cfg, tracer: cfg.tracer()}
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
	o.operationDur = seconds(MetricOperationDuration, operationDurationDesc, durationBuckets)
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

// ForListener implements transport.ListenerObserver: it returns the
// Observer bound to one listener, whose spans and metrics carry the
// destination's messaging.system (unless Config.System overrides it),
// messaging.destination.name and messaging.consumer.group.name.
func (o *Observer) ForListener(name string, d transport.Destination) transport.Observer {
	return &boundObserver{o: o, la: o.newAttrs(name, d)}
}

// outcomes are the transport.Outcome values, by index.
var outcomes = [...]transport.Outcome{
	transport.OutcomeAcked, transport.OutcomeNacked,
	transport.OutcomeDeadLettered, transport.OutcomeAbandoned,
}

// settleOps are the transport.SettleOp values, by index.
var settleOps = [...]transport.SettleOp{
	transport.SettleAck, transport.SettleNack,
	transport.SettleDeadLetter, transport.SettleRelease,
}

// listenerAttrs holds one listener's precomputed names, span options and
// attribute sets, so that the hot path does not build or sort attributes.
type listenerAttrs struct {
	base          []attribute.KeyValue // system, destination, consumer group
	system        attribute.KeyValue
	processName   string
	startOpts     []trace.SpanStartOption // consumer kind, fixed attributes
	startOptsRoot []trace.SpanStartOption // the same, with a new root
	receiveName   string
	receiveOpts   []trace.SpanStartOption // client kind, new root, fixed attributes
	settleNames   [len(settleOps)]string
	settleOpts    [len(settleOps)][]trace.SpanStartOption
	consumed      metric.MeasurementOption
	settled       [len(outcomes)]metric.MeasurementOption
	process       [len(outcomes)]metric.MeasurementOption
	receiveOK     metric.MeasurementOption
	settleOK      [len(settleOps)]metric.MeasurementOption
	endToEnd      metric.MeasurementOption
	dlExhausted   metric.MeasurementOption
	dlUnmappable  metric.MeasurementOption
	wavesMessages metric.MeasurementOption
	wavesEmpty    metric.MeasurementOption
	wavesError    metric.MeasurementOption
	probesFound   metric.MeasurementOption
	probesEmpty   metric.MeasurementOption
	plain         metric.MeasurementOption // base only
}

// with returns la's base attributes followed by kvs, in a new slice
// (attribute.NewSet sorts the slice it is given).
func (la *listenerAttrs) with(kvs ...attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(la.base)+len(kvs))
	return append(append(out, la.base...), kvs...)
}

// set returns la's base attributes and kvs as one precomputed set.
func (la *listenerAttrs) set(kvs ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(la.with(kvs...)...))
}

// attrs returns the attributes of the listener called name, for methods
// called without a binding: the destination is named after the listener.
func (o *Observer) attrs(listener string) *listenerAttrs {
	if la, ok := o.listeners.Load(listener); ok {
		return la.(*listenerAttrs)
	}
	actual, _ := o.listeners.LoadOrStore(listener, o.newAttrs(listener, transport.Destination{}))
	return actual.(*listenerAttrs)
}

// newAttrs builds the attributes of listener name consuming d.
func (o *Observer) newAttrs(name string, d transport.Destination) *listenerAttrs {
	if d.Name == "" {
		d.Name = name
	}
	la := &listenerAttrs{system: keySystem.String(o.cfg.system(d.System))}
	la.base = []attribute.KeyValue{la.system, keyDestination.String(d.Name)}
	if d.ConsumerGroup != "" {
		la.base = append(la.base, keyConsumerGroup.String(d.ConsumerGroup))
	}

	process := trace.WithAttributes(la.with(semconv.MessagingOperationTypeProcess, keyOperationName.String(opProcess))...)
	consumer := trace.WithSpanKind(trace.SpanKindConsumer)
	la.processName = opProcess + " " + d.Name
	la.startOpts = []trace.SpanStartOption{consumer, process}
	la.startOptsRoot = []trace.SpanStartOption{consumer, process, trace.WithNewRoot()}

	receive := la.with(semconv.MessagingOperationTypeReceive, keyOperationName.String(opReceive))
	la.receiveName = opReceive + " " + d.Name
	la.receiveOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithNewRoot(), trace.WithAttributes(receive...)}
	la.receiveOK = metric.WithAttributeSet(attribute.NewSet(receive...))
	for i, op := range settleOps {
		settle := la.with(semconv.MessagingOperationTypeSettle, keyOperationName.String(op.String()))
		la.settleNames[i] = op.String() + " " + d.Name
		la.settleOpts[i] = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(settle...)}
		la.settleOK[i] = metric.WithAttributeSet(attribute.NewSet(settle...))
	}

	la.consumed = la.set(keyOperationName.String(opReceive))
	la.endToEnd = la.set()
	la.dlExhausted = la.set(AttrDeadLetterCause.String("attempts_exhausted"))
	la.dlUnmappable = la.set(AttrDeadLetterCause.String("unmappable"))
	la.wavesMessages = la.set(AttrResult.String("messages"))
	la.wavesEmpty = la.set(AttrResult.String("empty"))
	la.wavesError = la.set(AttrResult.String("error"))
	la.probesFound = la.set(AttrResult.String("found"))
	la.probesEmpty = la.set(AttrResult.String("empty"))
	la.plain = la.set()
	for i, out := range outcomes {
		outcome := AttrOutcome.String(out.String())
		la.settled[i] = la.set(outcome)
		kvs := []attribute.KeyValue{keyOperationName.String(opProcess), outcome}
		if failed(out) {
			kvs = append(kvs, keyErrorType.String(out.String()))
		}
		la.process[i] = la.set(kvs...)
	}
	return la
}

// failed reports whether an outcome is a processing failure.
func failed(out transport.Outcome) bool {
	return out == transport.OutcomeNacked || out == transport.OutcomeDeadLettered
}

// WaveDone implements transport.Observer: it counts the wave by result,
// its probes, its size, and the deliveries it claimed.
func (o *Observer) WaveDone(listener string, launched, found, claimed int, err error) {
	o.waveDone(o.attrs(listener), launched, found, claimed, err)
}

func (o *Observer) waveDone(la *listenerAttrs, launched, found, claimed int, err error) {
	ctx := context.Background()
	switch {
	case err != nil:
		o.waves.Add(ctx, 1, la.wavesError)
	case claimed > 0:
		o.waves.Add(ctx, 1, la.wavesMessages)
	default:
		o.waves.Add(ctx, 1, la.wavesEmpty)
	}
	if launched > 0 {
		o.waveSize.Record(ctx, int64(launched), la.plain)
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

// Received implements transport.Observer: it records the receive call's
// duration (messaging.client.operation.duration, operation receive) and,
// when it claimed messages or failed, a client "receive <destination>"
// span with messaging.batch.message_count. Empty receives (idle polling)
// are measured but not traced.
func (o *Observer) Received(listener string, start time.Time, claimed int, err error) {
	o.received(o.attrs(listener), start, claimed, err)
}

func (o *Observer) received(la *listenerAttrs, start time.Time, claimed int, err error) {
	end := time.Now()
	opt := la.receiveOK
	if err != nil {
		opt = metric.WithAttributes(la.with(semconv.MessagingOperationTypeReceive,
			keyOperationName.String(opReceive), keyErrorType.String(errorType(err)))...)
	}
	o.operationDur.Record(context.Background(), end.Sub(start).Seconds(), opt)
	if claimed == 0 && err == nil {
		return
	}
	opts := append(la.receiveOpts[:len(la.receiveOpts):len(la.receiveOpts)], trace.WithTimestamp(start))
	_, span := o.tracer.Start(context.Background(), la.receiveName, opts...)
	if span.IsRecording() {
		span.SetAttributes(keyBatchCount.Int(claimed))
		if err != nil {
			endInError(span, err)
		}
	}
	span.End(trace.WithTimestamp(end))
}

// Settled implements transport.Observer: it records the settlement call's
// duration (messaging.client.operation.duration, operation type settle,
// operation name ack, nack, dead_letter or release) and, for a message
// whose process span is recording, a client "<operation> <destination>"
// span, the process span's child.
func (o *Observer) Settled(listener string, op transport.SettleOp, msg *message.Message, n int, start time.Time, err error) {
	o.settle(o.attrs(listener), op, msg, n, start, err)
}

func (o *Observer) settle(la *listenerAttrs, op transport.SettleOp, msg *message.Message, _ int, start time.Time, err error) {
	i := int(op)
	if i < 0 || i >= len(settleOps) {
		return
	}
	end := time.Now()
	opt := la.settleOK[i]
	if err != nil {
		opt = metric.WithAttributes(la.with(semconv.MessagingOperationTypeSettle,
			keyOperationName.String(op.String()), keyErrorType.String(errorType(err)))...)
	}
	o.operationDur.Record(context.Background(), end.Sub(start).Seconds(), opt)
	if msg == nil {
		return
	}
	ctx := msg.Context()
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	opts := append(la.settleOpts[i][:len(la.settleOpts[i]):len(la.settleOpts[i])], trace.WithTimestamp(start))
	_, span := o.tracer.Start(ctx, la.settleNames[i], opts...)
	if span.IsRecording() {
		span.SetAttributes(keyMessageID.String(msg.UUID))
		if err != nil {
			endInError(span, err)
		}
	}
	span.End(trace.WithTimestamp(end))
}

// endInError records err on span: the error, an error status and
// error.type.
func endInError(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(keyErrorType.String(errorType(err)))
}

// listenerKey carries a message's listener attributes in its context, for
// StartBatchSpan.
type listenerKey struct{}

// Delivering implements transport.Observer: it extracts the producer's trace
// context from the message metadata and starts a consumer "process" span,
// its child (or, with Config.Link, a new root linked to it; without a
// producer context, a new root). The returned context carries the span;
// finish ends it and records the settlement metrics.
func (o *Observer) Delivering(ctx context.Context, listener string, msg *message.Message) (context.Context, func(transport.Outcome)) {
	return o.delivering(ctx, o.attrs(listener), msg)
}

func (o *Observer) delivering(ctx context.Context, la *listenerAttrs, msg *message.Message) (context.Context, func(transport.Outcome)) {
	start := time.Now()
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
	ctx = context.WithValue(ctx, listenerKey{}, la)
	ctx, span := o.tracer.Start(ctx, la.processName, opts...)
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
	o.deadLetter(o.attrs(listener), msg, reason)
}

func (o *Observer) deadLetter(la *listenerAttrs, msg *message.Message, reason string) {
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
	o.fault(o.attrs(listener), f)
}

func (o *Observer) fault(la *listenerAttrs, f *transport.Fault) {
	stage := "unknown"
	if f != nil && f.Stage != "" {
		stage = f.Stage
	}
	o.faults.Add(context.Background(), 1, metric.WithAttributes(la.with(AttrFaultStage.String(stage))...))
}

// Rebuilt implements transport.Observer: it counts the rebuild.
func (o *Observer) Rebuilt(listener string) {
	o.rebuilds.Add(context.Background(), 1, o.attrs(listener).plain)
}

// boundObserver is an Observer bound to one listener (ForListener): it
// ignores the listener name its methods get.
type boundObserver struct {
	o  *Observer
	la *listenerAttrs
}

var _ transport.Observer = (*boundObserver)(nil)

func (b *boundObserver) WaveDone(_ string, launched, found, claimed int, err error) {
	b.o.waveDone(b.la, launched, found, claimed, err)
}

func (b *boundObserver) Received(_ string, start time.Time, claimed int, err error) {
	b.o.received(b.la, start, claimed, err)
}

func (b *boundObserver) Settled(_ string, op transport.SettleOp, msg *message.Message, n int, start time.Time, err error) {
	b.o.settle(b.la, op, msg, n, start, err)
}

func (b *boundObserver) Delivering(ctx context.Context, _ string, msg *message.Message) (context.Context, func(transport.Outcome)) {
	return b.o.delivering(ctx, b.la, msg)
}

func (b *boundObserver) DeadLettered(_ string, msg *message.Message, reason string) {
	b.o.deadLetter(b.la, msg, reason)
}

func (b *boundObserver) Faulted(_ string, f *transport.Fault) { b.o.fault(b.la, f) }

func (b *boundObserver) Rebuilt(string) {
	b.o.rebuilds.Add(context.Background(), 1, b.la.plain)
}
