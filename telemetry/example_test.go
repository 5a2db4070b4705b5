package telemetry_test

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport/mem"
)

// One trace from publisher to consumer: the publisher decorator injects the
// trace context into the metadata, the Observer set in the pipeline config
// continues it in a consumer span. The receive call that claimed the
// message is a client span of its own trace; the ack is a client span
// inside the consumer span. Spans carry the transport's messaging.system.
func Example() {
	ctx := context.Background()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(ctx) }()

	cfg := telemetry.Config{TracerProvider: tp} // nil providers: the global ones
	obs, err := telemetry.NewObserver(cfg)
	if err != nil {
		panic(err)
	}
	broker := mem.NewBroker()
	memPub, err := mem.NewPublisher(mem.PublisherConfig{Broker: broker}, nil)
	if err != nil {
		panic(err)
	}
	pub := telemetry.Publisher(memPub, cfg)
	sub, err := mem.NewSubscriber(mem.SubscriberConfig{
		Broker:   broker,
		Pipeline: receiver.Config{Observer: obs},
	}, nil)
	if err != nil {
		panic(err)
	}
	msgs, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		panic(err)
	}

	if err := pub.Publish("orders", message.NewMessage("order-1", []byte(`{"id":1}`))); err != nil {
		panic(err)
	}
	msg := <-msgs
	fmt.Println("traceparent propagated:", msg.Metadata.Get("traceparent") != "")
	msg.Ack()
	_ = sub.Close() // waits for the settlement, which ends the span

	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans.GetSpans() {
		byName[s.Name] = s
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		s := byName[name]
		attrs := attribute.NewSet(s.Attributes...)
		system, _ := attrs.Value(semconv.MessagingSystemKey)
		fmt.Println(name, s.SpanKind, system.AsString())
	}
	send, process, ack := byName["send orders"], byName["process orders"], byName["ack orders"]
	fmt.Println("one trace:", send.SpanContext.TraceID() == process.SpanContext.TraceID())
	fmt.Println("consumer's parent is the producer:", process.Parent.SpanID() == send.SpanContext.SpanID())
	fmt.Println("ack's parent is the consumer:", ack.Parent.SpanID() == process.SpanContext.SpanID())
	// Output:
	// traceparent propagated: true
	// ack orders client berth.mem
	// process orders consumer berth.mem
	// receive orders client berth.mem
	// send orders producer berth.mem
	// one trace: true
	// consumer's parent is the producer: true
	// ack's parent is the consumer: true
}

// Per-listener up-down counters: register a subscriber once; every
// collection reads its listeners' states.
func ExampleRegisterSubscriber() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()

	sub, err := mem.NewSubscriber(mem.SubscriberConfig{Broker: mem.NewBroker()}, nil)
	if err != nil {
		panic(err)
	}
	defer func() { _ = sub.Close() }()
	if _, err := sub.Subscribe(ctx, "orders"); err != nil {
		panic(err)
	}
	reg, err := telemetry.RegisterSubscriber(mp.Meter(telemetry.ScopeName), "orders-service", sub)
	if err != nil {
		panic(err)
	}
	defer func() { _ = reg.Unregister() }()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == telemetry.MetricQueueCount || m.Name == telemetry.MetricLatched {
			p := m.Data.(metricdata.Sum[int64]).DataPoints[0]
			dest, _ := p.Attributes.Value("messaging.destination.name")
			fmt.Printf("%s{destination=%s} = %d\n", m.Name, dest.AsString(), p.Value)
		}
	}
	// Output:
	// berth.listener.queue_count{destination=orders} = 0
	// berth.listener.latched{destination=orders} = 0
}

// SQS request counts (or SQL statement counts) as an observable counter:
// any func() map[string]int64 will do, such as (*sqs.RequestCounter).Counts.
func ExampleRegisterRoundTripper() {
	counts := func() map[string]int64 {
		return map[string]int64{"ReceiveMessage": 12, "DeleteMessageBatch": 3}
	}
	reg, err := telemetry.RegisterRoundTripper(nil, "orders-sqs", telemetry.RoundTripFunc(counts))
	if err != nil {
		panic(err)
	}
	defer func() { _ = reg.Unregister() }()
	fmt.Println("registered")
	// Output: registered
}
