package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
)

type failingPublisher struct{ err error }

func (p failingPublisher) Publish(string, ...*message.Message) error { return p.err }
func (p failingPublisher) Close() error                              { return nil }

// A failed publish ends its span in error and counts the messages with an
// error.type.
func TestPublisherError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("sqs: publish: %w", transport.ErrMessageTooLarge), "message_too_large"},
		{transport.ErrClosed, "closed"},
		{context.Canceled, "canceled"},
		{errors.New("boom"), "_OTHER"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			r := newRig(t)
			pub := telemetry.Publisher(failingPublisher{tc.err}, r.config())
			err := pub.Publish("orders", message.NewMessage("m1", nil))
			if !errors.Is(err, tc.err) {
				t.Fatalf("Publish = %v, want %v", err, tc.err)
			}
			send := r.span(t, "send orders")
			if send.Status.Code != codes.Error {
				t.Errorf("status = %v, want error", send.Status)
			}
			wantAttr(t, send, semconv.ErrorTypeKey.String(tc.want))
			rm := r.collect(t)
			if v, _, ok := value(rm, telemetry.MetricSentMessages, semconv.ErrorTypeKey.String(tc.want)); !ok || v != 1 {
				t.Errorf("%s{error.type=%s} = %v, want 1", telemetry.MetricSentMessages, tc.want, v)
			}
		})
	}
}

// With no propagator configured and none installed globally, the W3C trace
// context goes into exactly the traceparent key (tracestate only when the
// span has one), and the publish time is stamped only where absent.
func TestPublisherMetadata(t *testing.T) {
	r := newRig(t)
	var got *message.Message
	pub := telemetry.Publisher(publishFunc(func(_ string, msgs ...*message.Message) error {
		got = msgs[0]
		return nil
	}), r.config())
	m := message.NewMessage("m1", []byte("x"))
	m.Metadata = nil
	if err := pub.Publish("orders", m); err != nil {
		t.Fatal(err)
	}
	if len(got.Metadata) != 2 || got.Metadata.Get("traceparent") == "" || got.Metadata.Get(transport.MetadataPublishedAt) == "" {
		t.Errorf("metadata = %v, want traceparent and %s only", got.Metadata, transport.MetadataPublishedAt)
	}
	m2 := message.NewMessage("m2", nil)
	m2.Metadata.Set(transport.MetadataPublishedAt, "2020-01-01T00:00:00Z")
	if err := pub.Publish("orders", m2); err != nil {
		t.Fatal(err)
	}
	if v := m2.Metadata.Get(transport.MetadataPublishedAt); v != "2020-01-01T00:00:00Z" {
		t.Errorf("publish time overwritten: %s", v)
	}
	sc := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(got.Metadata))
	if !trace.SpanContextFromContext(sc).IsValid() {
		t.Error("the injected traceparent does not parse")
	}
}

type publishFunc func(string, ...*message.Message) error

func (f publishFunc) Publish(topic string, msgs ...*message.Message) error { return f(topic, msgs...) }
func (publishFunc) Close() error                                           { return nil }

// A message without trace context still gets a process span (a root), and
// the observer's events record without a span.
func TestObserverWithoutContext(t *testing.T) {
	r := newRig(t)
	obs, err := telemetry.NewObserver(r.config())
	if err != nil {
		t.Fatal(err)
	}
	msg := message.NewMessage("m1", nil)
	// A span in the subscription's context is not the message's parent.
	subCtx, subSpan := r.tp.Tracer("test").Start(context.Background(), "subscription")
	defer subSpan.End()
	ctx, finish := obs.Delivering(subCtx, "orders", msg)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("no span in the returned context")
	}
	finish(transport.OutcomeAbandoned)
	proc := r.span(t, "process orders")
	if proc.Parent.IsValid() {
		t.Errorf("parent = %s, want none", proc.Parent.SpanID())
	}
	wantAttr(t, proc, telemetry.AttrOutcome.String("abandoned"))
	if proc.Status.Code != codes.Unset {
		t.Errorf("abandoned span status = %v, want unset", proc.Status)
	}
	obs.Faulted("orders", nil)
	obs.WaveDone("orders", 4, 0, 0, errors.New("receive failed"))
	rm := r.collect(t)
	if v, _, _ := value(rm, telemetry.MetricFaults, telemetry.AttrFaultStage.String("unknown")); v != 1 {
		t.Errorf("%s{stage=unknown} = %v, want 1", telemetry.MetricFaults, v)
	}
	if v, _, _ := value(rm, telemetry.MetricReceiveWaves, telemetry.AttrResult.String("error")); v != 1 {
		t.Errorf("%s{result=error} = %v, want 1", telemetry.MetricReceiveWaves, v)
	}
	if v, _, _ := value(rm, telemetry.MetricReceiveProbes, telemetry.AttrResult.String("empty")); v != 4 {
		t.Errorf("%s{result=empty} = %v, want 4", telemetry.MetricReceiveProbes, v)
	}
}

// The package-level StartBatchSpan works with the global (no-op) provider.
func TestStartBatchSpanGlobal(t *testing.T) {
	ctx, span := telemetry.StartBatchSpan(context.Background(), []*message.Message{message.NewMessage("a", nil), nil})
	if ctx == nil || span == nil {
		t.Fatal("nil context or span")
	}
	span.End()
}

func TestRegisterNil(t *testing.T) {
	if _, err := telemetry.RegisterSubscriber(nil, "x", nil); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("RegisterSubscriber(nil sub) = %v, want ErrInvalidConfig", err)
	}
	if _, err := telemetry.RegisterRoundTripper(nil, "x", nil); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("RegisterRoundTripper(nil) = %v, want ErrInvalidConfig", err)
	}
}

// With no Config.Propagator, the global propagator is read when used: one
// installed after the Observer and the Publisher were built carries
// baggage from producer to consumer; before it, W3C Trace Context only.
func TestGlobalPropagatorReadWhenUsed(t *testing.T) {
	r := newRig(t)
	var got *message.Message
	pub := telemetry.Publisher(publishFunc(func(_ string, msgs ...*message.Message) error {
		got = msgs[0]
		return nil
	}), r.config())
	obs, err := telemetry.NewObserver(r.config())
	if err != nil {
		t.Fatal(err)
	}
	member, err := baggage.NewMember("tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	publish := func() *message.Message {
		t.Helper()
		m := message.NewMessage(watermill.NewUUID(), nil)
		m.SetContext(baggage.ContextWithBaggage(context.Background(), bag))
		if err := pub.Publish("orders", m); err != nil {
			t.Fatal(err)
		}
		return got
	}

	if m := publish(); m.Metadata.Get("traceparent") == "" || m.Metadata.Get("baggage") != "" {
		t.Fatalf("before a global propagator: metadata %v, want traceparent and no baggage", m.Metadata)
	}

	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	// An empty composite propagates nothing, as if none were installed.
	t.Cleanup(func() { otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator()) })

	m := publish()
	if m.Metadata.Get("traceparent") == "" || m.Metadata.Get("baggage") != "tenant=acme" {
		t.Fatalf("after otel.SetTextMapPropagator: metadata %v, want traceparent and baggage=tenant=acme", m.Metadata)
	}
	ctx, finish := obs.Delivering(context.Background(), "orders", m)
	finish(transport.OutcomeAcked)
	if v := baggage.FromContext(ctx).Member("tenant").Value(); v != "acme" {
		t.Errorf("the consumer context's baggage tenant = %q, want acme", v)
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		t.Error("no consumer span")
	}
}

// A SQL publisher's parked messages (published to a topic with no
// subscription) are reported as berth.publish.parked, until Close.
func TestPublisherParked(t *testing.T) {
	r := newRig(t)
	inner, err := sqlite.NewPublisher(sqlite.PublisherConfig{DSN: filepath.Join(t.TempDir(), "parked.db")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := telemetry.Publisher(inner, r.config())
	for i := range 3 {
		if err := pub.Publish("orders", message.NewMessage(fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	rm := r.collect(t)
	if v, _, ok := value(rm, telemetry.MetricParked, semconv.MessagingSystemKey.String(sqlite.MessagingSystem)); !ok || v != 3 {
		t.Errorf("%s = %v (found %v), want 3", telemetry.MetricParked, v, ok)
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := value(r.collect(t), telemetry.MetricParked); ok {
		t.Errorf("%s still reported after Close", telemetry.MetricParked)
	}
}
