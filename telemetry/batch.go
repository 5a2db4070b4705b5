package telemetry

import (
	"context"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// StartBatchSpan starts one consumer "process" span for a batch handler
// (package batching's BatchFunc, or any handler of many messages), using the
// global providers (see Observer.StartBatchSpan for configured ones). The
// span is a child of ctx, carries messaging.batch.message_count, and links
// to every member's context: the span in the member's Context() (the
// Observer's consumer span), or else the trace context in its metadata.
// Members that carry neither are counted but not linked. When every member
// came from the same destination (and consumer group) the span is named
// "process <destination>" and has its messaging.destination.name and
// messaging.consumer.group.name; otherwise it is named "process".
// messaging.system is the members' when they agree, else DefaultSystem.
// The caller ends the span.
func StartBatchSpan(ctx context.Context, msgs []*message.Message) (context.Context, trace.Span) {
	var c Config
	c = c.withDefaults()
	return startBatchSpan(ctx, c, c.tracer(), msgs)
}

// StartBatchSpan is the package-level StartBatchSpan with the Observer's
// tracer provider, propagator and system override.
func (o *Observer) StartBatchSpan(ctx context.Context, msgs []*message.Message) (context.Context, trace.Span) {
	return startBatchSpan(ctx, o.cfg, o.tracer, msgs)
}

func startBatchSpan(ctx context.Context, cfg Config, tracer trace.Tracer, msgs []*message.Message) (context.Context, trace.Span) {
	prop := cfg.propagator()
	links := make([]trace.Link, 0, len(msgs))
	var (
		first      *listenerAttrs
		seen       bool
		sameDest   = true
		sameSystem = true
	)
	for _, m := range msgs {
		if m == nil {
			continue
		}
		mctx := m.Context()
		sc := trace.SpanContextFromContext(mctx)
		if !sc.IsValid() {
			sc = trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier(m.Metadata)))
		}
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{keyMessageID.String(m.UUID)}})
		}
		la, _ := mctx.Value(listenerKey{}).(*listenerAttrs)
		if !seen {
			first, seen = la, true
			continue
		}
		sameDest = sameDest && sameBase(first, la)
		sameSystem = sameSystem && first != nil && la != nil && first.system == la.system
	}
	name := opProcess
	attrs := []attribute.KeyValue{semconv.MessagingOperationTypeProcess,
		keyOperationName.String(opProcess), keyBatchCount.Int(len(msgs))}
	switch {
	case first != nil && sameDest:
		name = first.processName
		attrs = append(attrs, first.base...)
	case first != nil && sameSystem:
		attrs = append(attrs, first.system)
	default:
		attrs = append(attrs, keySystem.String(cfg.system("")))
	}
	return tracer.Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrs...),
		trace.WithLinks(links...))
}

// sameBase reports whether a and b name the same system, destination and
// consumer group.
func sameBase(a, b *listenerAttrs) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.Equal(a.base, b.base)
}

// handleError reports an instrumentation error to the global OpenTelemetry
// error handler.
func handleError(err error) { otel.Handle(err) }
