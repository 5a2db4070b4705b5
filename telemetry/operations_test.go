package telemetry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport"
)

// Receive calls are measured whatever they return; those that claimed
// messages or failed are also client spans, starting when the call did.
func TestReceived(t *testing.T) {
	r := newRig(t)
	obs, err := telemetry.NewObserver(r.config())
	if err != nil {
		t.Fatal(err)
	}
	bound := obs.ForListener("orders", transport.Destination{System: "berth.sqlite", Name: "orders"})
	start := time.Now().Add(-time.Second)
	bound.Received("orders", start, 0, nil) // empty: measured, not traced
	bound.Received("orders", start, 3, nil)
	bound.Received("orders", start, 0, fmt.Errorf("claim: %w", transport.ErrQueueNotFound))

	spans := r.spansNamed(t, "receive orders", 2)
	ok, failed := spans[0], spans[1]
	if len(r.spans.GetSpans()) != 2 {
		t.Errorf("%d spans, want 2 (no span for the empty receive)", len(r.spans.GetSpans()))
	}
	for _, s := range spans {
		if s.SpanKind != trace.SpanKindClient || !s.StartTime.Equal(start) {
			t.Errorf("receive span kind %s, start %v; want client, %v", s.SpanKind, s.StartTime, start)
		}
		wantAttr(t, s, semconv.MessagingOperationTypeReceive)
		wantAttr(t, s, semconv.MessagingOperationName("receive"))
		wantAttr(t, s, semconv.MessagingSystemKey.String("berth.sqlite"))
	}
	wantAttr(t, ok, semconv.MessagingBatchMessageCount(3))
	wantAttr(t, failed, semconv.MessagingBatchMessageCount(0))
	wantAttr(t, failed, semconv.ErrorTypeKey.String("queue_not_found"))
	if failed.Status.Code != codes.Error {
		t.Errorf("failed receive status = %v, want error", failed.Status)
	}

	rm := r.collect(t)
	if _, n, _ := value(rm, telemetry.MetricOperationDuration, semconv.MessagingOperationTypeReceive,
		semconv.MessagingDestinationName("orders")); n != 3 {
		t.Errorf("%s{receive} count = %d, want 3", telemetry.MetricOperationDuration, n)
	}
	if sum, n, _ := value(rm, telemetry.MetricOperationDuration, semconv.MessagingOperationTypeReceive,
		semconv.ErrorTypeKey.String("queue_not_found")); n != 1 || sum < 1 {
		t.Errorf("%s{receive, error.type=queue_not_found} = %d points summing %vs, want 1 of ≥ 1s", telemetry.MetricOperationDuration, n, sum)
	}
}

// Settlements are measured by operation; a traced message's settlement is
// a client span, child of its process span; an untraced one's is not.
func TestSettled(t *testing.T) {
	r := newRig(t)
	obs, err := telemetry.NewObserver(r.config())
	if err != nil {
		t.Fatal(err)
	}
	bound := obs.ForListener("orders/billing", transport.Destination{System: "berth.mem", Name: "orders", ConsumerGroup: "billing"})
	msg := message.NewMessage("m1", nil)
	ctx, finish := bound.Delivering(context.Background(), "orders/billing", msg)
	msg.SetContext(ctx)
	start := time.Now()
	bound.Settled("orders/billing", transport.SettleNack, msg, 1, start, fmt.Errorf("retry: %w", transport.ErrLeaseLost))
	finish(transport.OutcomeNacked)
	bound.Settled("orders/billing", transport.SettleRelease, nil, 4, start, nil)
	untraced := message.NewMessage("m2", nil) // its context carries no span
	bound.Settled("orders/billing", transport.SettleAck, untraced, 1, start, nil)

	proc := r.span(t, "process orders")
	nack := r.span(t, "nack orders")
	if nack.SpanKind != trace.SpanKindClient || nack.Parent.SpanID() != proc.SpanContext.SpanID() {
		t.Errorf("nack span kind %s, parent %s; want client, the process span %s", nack.SpanKind, nack.Parent.SpanID(), proc.SpanContext.SpanID())
	}
	wantAttr(t, nack, semconv.MessagingOperationTypeSettle)
	wantAttr(t, nack, semconv.MessagingOperationName("nack"))
	wantAttr(t, nack, semconv.MessagingConsumerGroupName("billing"))
	wantAttr(t, nack, semconv.MessagingMessageID("m1"))
	wantAttr(t, nack, semconv.ErrorTypeKey.String("lease_lost"))
	for _, s := range r.spans.GetSpans() {
		if s.Name == "release orders" || s.Name == "ack orders" {
			t.Errorf("span %q: a release, or a settlement of an untraced message, is not traced", s.Name)
		}
	}

	rm := r.collect(t)
	for op, want := range map[string]uint64{"ack": 1, "nack": 1, "release": 1} {
		if _, n, _ := value(rm, telemetry.MetricOperationDuration, semconv.MessagingOperationTypeSettle,
			semconv.MessagingOperationName(op), semconv.MessagingConsumerGroupName("billing")); n != want {
			t.Errorf("%s{settle %s} count = %d, want %d", telemetry.MetricOperationDuration, op, n, want)
		}
	}
	if _, n, _ := value(rm, telemetry.MetricOperationDuration, semconv.MessagingOperationName("nack"),
		semconv.ErrorTypeKey.String("lease_lost")); n != 1 {
		t.Errorf("%s{nack, error.type=lease_lost} count = %d, want 1", telemetry.MetricOperationDuration, n)
	}
}
