package telemetry

import (
	"context"
	"database/sql"
	"errors"
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

// publisher decorates a message.Publisher with spans, context propagation
// and metrics.
type publisher struct {
	next   message.Publisher
	cfg    Config
	tracer trace.Tracer
	system attribute.KeyValue
	sent   metric.Int64Counter
	dur    metric.Float64Histogram
	topics *sync.Map           // topic → *topicAttrs, shared with transaction-bound copies
	parked metric.Registration // nil unless next is a Parker; never in a transaction-bound copy
}

// Parker is implemented by publishers that park messages published to a
// topic with no subscription (sqlqueue.Publisher, mem.Publisher): they
// wait in the topic's default queue for consumer groups registered later.
// ParkedMessages is the running count.
type Parker interface {
	ParkedMessages() int64
}

// txPublisher is the decorator of a publisher that can publish inside a
// SQL transaction: it passes the capability on, instrumented.
type txPublisher struct {
	*publisher
}

// WithTx implements transport.TxPublisher: the publisher bound to tx
// records spans and metrics as this one does.
func (p txPublisher) WithTx(tx *sql.Tx) message.Publisher {
	c := *p.publisher
	c.next = p.next.(transport.TxPublisher).WithTx(tx)
	c.parked = nil // the counter stays with p: closing the copy leaves it
	return &c
}

// DB implements transport.DBPublisher when the decorated publisher does
// (nil otherwise): transport.DBOf finds the pool through the decorator.
func (p txPublisher) DB() *sql.DB {
	if dp, ok := p.next.(transport.DBPublisher); ok {
		return dp.DB()
	}
	return nil
}

// Publisher returns pub instrumented with OpenTelemetry. Each Publish call
// gets a producer "send" span whose parent is the first message's
// Context(); the W3C trace context (traceparent and, when not empty,
// tracestate: two metadata keys with the default propagator) is injected
// into every message's metadata, and transport.MetadataPublishedAt is set
// to the publish time where absent, for end-to-end latency.
//
// A call with one message injects the send span's context. A call with
// several creates a "create" span per message (child of that message's
// Context()), injects each message's own, and the send span, then of kind
// client, links to all of them with messaging.batch.message_count, as the
// messaging semantic conventions describe for batches.
//
// When pub is a Parker, the observable counter berth.publish.parked reports
// its parked messages (with messaging.system) until Close.
//
// messaging.system is Config.System, else what pub names (every Berth
// publisher implements SystemNamer: aws_sqs, aws.sns, berth.postgres, …),
// else DefaultSystem. The returned publisher implements SystemNamer too.
//
// When pub implements transport.TxPublisher (the SQL transports'
// publishers), so does the returned publisher: transport.PublishInTx finds
// the capability through it, and what it publishes inside a transaction
// is instrumented too; it implements transport.DBPublisher as well, so
// transport.DBOf finds the pool through it.
//
// The metadata of the caller's messages is modified. The decorator exposes
// only message.Publisher, SystemNamer, transport.TxPublisher and
// transport.DBPublisher: keep a
// reference to pub for other transport-specific methods.
func Publisher(pub message.Publisher, cfg Config) message.Publisher {
	cfg = cfg.withDefaults()
	m := cfg.meter()
	p := &publisher{
		next:   pub,
		cfg:    cfg,
		tracer: cfg.tracer(),
		system: keySystem.String(cfg.system(systemOf(pub))),
		topics: new(sync.Map),
	}
	var errs []error
	var err error
	p.sent, err = m.Int64Counter(MetricSentMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Number of messages producer attempted to send to the broker."))
	errs = append(errs, err)
	p.dur, err = m.Float64Histogram(MetricOperationDuration, metric.WithUnit("s"),
		metric.WithDescription(operationDurationDesc),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	if pk, ok := pub.(Parker); ok {
		c, err := m.Int64ObservableCounter(MetricParked, metric.WithUnit("{message}"),
			metric.WithDescription("Messages published to a topic with no subscription, parked for consumer groups registered later."))
		errs = append(errs, err)
		if err == nil {
			set := metric.WithAttributeSet(attribute.NewSet(p.system))
			p.parked, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
				o.ObserveInt64(c, pk.ParkedMessages(), set)
				return nil
			}, c)
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		// The API returns usable (no-op) instruments with an error; report
		// it the OpenTelemetry way rather than failing the publisher.
		handleError(err)
	}
	if _, ok := pub.(transport.TxPublisher); ok {
		return txPublisher{p}
	}
	return p
}

type topicAttrs struct {
	sendName, createName string
	sendOpts             []trace.SpanStartOption // producer kind, fixed attributes
	batchSendOpts        []trace.SpanStartOption // client kind, fixed attributes
	createOpts           []trace.SpanStartOption
	ok                   metric.MeasurementOption
}

func (p *publisher) attrs(topic string) *topicAttrs {
	if ta, ok := p.topics.Load(topic); ok {
		return ta.(*topicAttrs)
	}
	dest := keyDestination.String(topic)
	send := trace.WithAttributes(p.system, dest, semconv.MessagingOperationTypeSend, keyOperationName.String(opSend))
	producer := trace.WithSpanKind(trace.SpanKindProducer)
	ta := &topicAttrs{
		sendName:      opSend + " " + topic,
		createName:    opCreate + " " + topic,
		sendOpts:      []trace.SpanStartOption{producer, send},
		batchSendOpts: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), send},
		createOpts: []trace.SpanStartOption{producer, trace.WithAttributes(p.system, dest,
			semconv.MessagingOperationTypeCreate, keyOperationName.String(opCreate))},
		ok: metric.WithAttributeSet(attribute.NewSet(p.system, dest, keyOperationName.String(opSend), semconv.MessagingOperationTypeSend)),
	}
	actual, _ := p.topics.LoadOrStore(topic, ta)
	return actual.(*topicAttrs)
}

// messageAttrs returns a producer span's per-message attributes.
func (p *publisher) messageAttrs(msg *message.Message) []attribute.KeyValue {
	kvs := make([]attribute.KeyValue, 0, 3)
	kvs = append(kvs, keyMessageID.String(msg.UUID), keyBodySize.Int(len(msg.Payload)))
	if p.cfg.CorrelationIDKey != "" {
		if v := msg.Metadata.Get(p.cfg.CorrelationIDKey); v != "" {
			kvs = append(kvs, keyConversationID.String(v))
		}
	}
	return kvs
}

// Publish implements message.Publisher.
func (p *publisher) Publish(topic string, msgs ...*message.Message) error {
	if len(msgs) == 0 {
		return p.next.Publish(topic, msgs...)
	}
	start := time.Now()
	ta := p.attrs(topic)
	stamp := ""
	for _, m := range msgs {
		if m.Metadata == nil {
			m.Metadata = message.Metadata{}
		}
		if _, ok := m.Metadata[transport.MetadataPublishedAt]; !ok {
			if stamp == "" {
				stamp = start.UTC().Format(time.RFC3339Nano)
			}
			m.Metadata[transport.MetadataPublishedAt] = stamp
		}
	}

	var (
		ctx  context.Context
		span trace.Span
		prop = p.cfg.propagator()
	)
	if len(msgs) == 1 {
		m := msgs[0]
		ctx, span = p.tracer.Start(m.Context(), ta.sendName, ta.sendOpts...)
		if span.IsRecording() {
			span.SetAttributes(p.messageAttrs(m)...)
		}
		prop.Inject(ctx, propagation.MapCarrier(m.Metadata))
	} else {
		var links []trace.Link
		for _, m := range msgs {
			cctx, cspan := p.tracer.Start(m.Context(), ta.createName, ta.createOpts...)
			prop.Inject(cctx, propagation.MapCarrier(m.Metadata))
			if cspan.IsRecording() {
				cspan.SetAttributes(p.messageAttrs(m)...)
				links = append(links, trace.Link{SpanContext: cspan.SpanContext()})
			}
			cspan.End()
		}
		opts := append(ta.batchSendOpts[:len(ta.batchSendOpts):len(ta.batchSendOpts)], trace.WithLinks(links...))
		ctx, span = p.tracer.Start(msgs[0].Context(), ta.sendName, opts...)
		if span.IsRecording() {
			span.SetAttributes(keyBatchCount.Int(len(msgs)))
		}
	}

	err := p.next.Publish(topic, msgs...)

	end := time.Now()
	opt := ta.ok
	if err != nil {
		et := errorType(err)
		opt = metric.WithAttributes(p.system, keyDestination.String(topic), keyOperationName.String(opSend),
			semconv.MessagingOperationTypeSend, keyErrorType.String(et))
		if span.IsRecording() {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(keyErrorType.String(et))
		}
	}
	span.End()
	p.sent.Add(ctx, int64(len(msgs)), opt)
	p.dur.Record(ctx, end.Sub(start).Seconds(), opt)
	return err
}

// Close implements message.Publisher.
func (p *publisher) Close() error {
	if p.parked != nil {
		_ = p.parked.Unregister()
	}
	return p.next.Close()
}

// MessagingSystem implements SystemNamer.
func (p *publisher) MessagingSystem() string { return p.system.Value.AsString() }

// errorType maps an error to a low-cardinality error.type value.
func errorType(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, transport.ErrClosed):
		return "closed"
	case errors.Is(err, transport.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, transport.ErrMessageTooLarge):
		return "message_too_large"
	case errors.Is(err, transport.ErrQueueNotFound):
		return "queue_not_found"
	case errors.Is(err, transport.ErrInvalidConfig):
		return "invalid_config"
	default:
		return "_OTHER"
	}
}
