package telemetry_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport"
)

// namedPublisher is a publisher from a transport that names its system.
type namedPublisher struct {
	publishFunc
	system string
}

func (p namedPublisher) MessagingSystem() string { return p.system }

func discard(string, ...*message.Message) error { return nil }

// messaging.system comes from the publisher when it names one, from
// Config.System when set, and is DefaultSystem otherwise; the decorator
// names it in turn.
func TestPublisherSystem(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pub    message.Publisher
		system string
		want   string
	}{
		{"transport", namedPublisher{discard, "aws_sqs"}, "", "aws_sqs"},
		{"override", namedPublisher{discard, "aws_sqs"}, "my.system", "my.system"},
		{"unnamed", publishFunc(discard), "", telemetry.DefaultSystem},
		{"named empty", namedPublisher{discard, ""}, "", telemetry.DefaultSystem},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			cfg := r.config()
			cfg.System = tc.system
			pub := telemetry.Publisher(tc.pub, cfg)
			if err := pub.Publish("orders", message.NewMessage("m1", nil)); err != nil {
				t.Fatal(err)
			}
			wantAttr(t, r.span(t, "send orders"), semconv.MessagingSystemKey.String(tc.want))
			if v, _, ok := value(r.collect(t), telemetry.MetricSentMessages, semconv.MessagingSystemKey.String(tc.want)); !ok || v != 1 {
				t.Errorf("%s{messaging.system=%s} = %v, want 1", telemetry.MetricSentMessages, tc.want, v)
			}
			if got := pub.(telemetry.SystemNamer).MessagingSystem(); got != tc.want {
				t.Errorf("decorator's MessagingSystem() = %q, want %q", got, tc.want)
			}
		})
	}
}

// A bound Observer reports the listener's destination: system (unless
// Config.System overrides it), destination name and consumer group apart,
// and names the process span after the destination, not the listener.
func TestObserverDestination(t *testing.T) {
	d := transport.Destination{System: "berth.postgres", Name: "orders", ConsumerGroup: "billing"}
	for _, tc := range []struct {
		name, override, want string
	}{
		{"transport", "", "berth.postgres"},
		{"override", "my.system", "my.system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			cfg := r.config()
			cfg.System = tc.override
			obs, err := telemetry.NewObserver(cfg)
			if err != nil {
				t.Fatal(err)
			}
			bound := obs.ForListener("orders/billing", d)
			_, finish := bound.Delivering(context.Background(), "orders/billing", message.NewMessage("m1", nil))
			finish(transport.OutcomeAcked)
			bound.WaveDone("orders/billing", 1, 1, 1, nil)

			want := []attribute.KeyValue{semconv.MessagingSystemKey.String(tc.want),
				semconv.MessagingDestinationName("orders"), semconv.MessagingConsumerGroupName("billing")}
			proc := r.span(t, "process orders")
			for _, kv := range want {
				wantAttr(t, proc, kv)
			}
			rm := r.collect(t)
			for _, name := range []string{telemetry.MetricSettledMessages, telemetry.MetricProcessDuration,
				telemetry.MetricConsumedMessages, telemetry.MetricReceiveWaves} {
				if _, _, ok := value(rm, name, want...); !ok {
					t.Errorf("%s: no point with %v", name, want)
				}
			}
		})
	}
}

// Called without a binding, the Observer names the destination after the
// listener and the system after Config.System or DefaultSystem.
func TestObserverUnbound(t *testing.T) {
	r := newRig(t)
	obs, err := telemetry.NewObserver(r.config())
	if err != nil {
		t.Fatal(err)
	}
	_, finish := obs.Delivering(context.Background(), "orders/billing", message.NewMessage("m1", nil))
	finish(transport.OutcomeAcked)
	proc := r.span(t, "process orders/billing")
	wantAttr(t, proc, semconv.MessagingSystemKey.String(telemetry.DefaultSystem))
	wantAttr(t, proc, semconv.MessagingDestinationName("orders/billing"))
	if _, ok := attr(proc, semconv.MessagingConsumerGroupNameKey); ok {
		t.Error("unbound process span has a consumer group")
	}
}

// A batch span of members from one destination takes its attributes; of
// members from two, it is named "process" and keeps the system they share.
func TestBatchSpanDestinations(t *testing.T) {
	r := newRig(t)
	obs, err := telemetry.NewObserver(r.config())
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(name string, d transport.Destination) *message.Message {
		m := message.NewMessage(name, nil)
		ctx, finish := obs.ForListener(name, d).Delivering(context.Background(), name, m)
		t.Cleanup(func() { finish(transport.OutcomeAcked) })
		m.SetContext(ctx)
		return m
	}
	orders := transport.Destination{System: "berth.sqlite", Name: "orders", ConsumerGroup: "billing"}
	a, b := deliver("a", orders), deliver("b", orders)
	c := deliver("c", transport.Destination{System: "berth.sqlite", Name: "invoices"})

	_, same := obs.StartBatchSpan(context.Background(), []*message.Message{a, b})
	same.End()
	_, mixed := obs.StartBatchSpan(context.Background(), []*message.Message{a, c})
	mixed.End()

	one := r.span(t, "process orders") // the members' spans end at cleanup
	wantAttr(t, one, semconv.MessagingBatchMessageCount(2))
	wantAttr(t, one, semconv.MessagingConsumerGroupName("billing"))
	wantAttr(t, one, semconv.MessagingSystemKey.String("berth.sqlite"))
	two := r.span(t, "process")
	wantAttr(t, two, semconv.MessagingSystemKey.String("berth.sqlite"))
	if _, ok := attr(two, semconv.MessagingDestinationNameKey); ok {
		t.Error("a batch of two destinations has messaging.destination.name")
	}
	if two.SpanKind != trace.SpanKindConsumer {
		t.Errorf("batch span kind = %s, want consumer", two.SpanKind)
	}
}
