package telemetry

import (
	"context"

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
// came from the same listener the span is named "process <listener>" and
// has messaging.destination.name; otherwise it is named "process". The
// caller ends the span.
func StartBatchSpan(ctx context.Context, msgs []*message.Message) (context.Context, trace.Span) {
	var c Config
	c = c.withDefaults()
	return startBatchSpan(ctx, c.tracer(), c.propagator(), keySystem.String(c.System), msgs)
}

// StartBatchSpan is the package-level StartBatchSpan with the Observer's
// tracer provider, propagator and system.
func (o *Observer) StartBatchSpan(ctx context.Context, msgs []*message.Message) (context.Context, trace.Span) {
	return startBatchSpan(ctx, o.tracer, o.cfg.propagator(), o.system, msgs)
}

func startBatchSpan(ctx context.Context, tracer trace.Tracer, prop propagation.TextMapPropagator, system attribute.KeyValue, msgs []*message.Message) (context.Context, trace.Span) {
	links := make([]trace.Link, 0, len(msgs))
	dest, same, first := "", true, true
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
		d, _ := mctx.Value(destinationKey{}).(string)
		if first {
			dest, first = d, false
		} else if d != dest {
			same = false
		}
	}
	name := "process"
	attrs := []attribute.KeyValue{system, semconv.MessagingOperationTypeProcess,
		keyOperationName.String("process"), keyBatchCount.Int(len(msgs))}
	if same && dest != "" {
		name += " " + dest
		attrs = append(attrs, keyDestination.String(dest))
	}
	return tracer.Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrs...),
		trace.WithLinks(links...))
}

// handleError reports an instrumentation error to the global OpenTelemetry
// error handler.
func handleError(err error) { otel.Handle(err) }
