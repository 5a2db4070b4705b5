package telemetry_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/mem"
)

// countingExporter keeps span counts in memory and drops the spans.
type countingExporter struct{ n atomic.Int64 }

func (e *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.n.Add(int64(len(spans)))
	return nil
}
func (e *countingExporter) Shutdown(context.Context) error { return nil }

// benchConfigs: no instrumentation at all, the instrumentation over no-op
// providers, and over the SDK (every span sampled and batched to an
// in-memory exporter, metrics aggregated for a manual reader).
func benchConfigs(b *testing.B) []struct {
	name string
	cfg  *telemetry.Config
} {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(&countingExporter{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return []struct {
		name string
		cfg  *telemetry.Config
	}{
		{"none", nil},
		{"noop", &telemetry.Config{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}},
		{"sdk", &telemetry.Config{TracerProvider: tp, MeterProvider: mp}},
	}
}

// BenchmarkEndToEnd: publish → consume → ack over mem://, per message, in
// rounds of 256 messages published one per call and then consumed by a
// subscriber that acks each (Concurrency 64): the pipeline runs flat out
// rather than waking per message, and the in-process broker (whose claim
// scans its queue) stays small.
func BenchmarkEndToEnd(b *testing.B) {
	for _, bc := range benchConfigs(b) {
		b.Run(bc.name, func(b *testing.B) {
			broker := mem.NewBroker()
			broker.Ensure("bench", "")
			var pub message.Publisher
			pub, _ = mem.NewPublisher(mem.PublisherConfig{Broker: broker}, nil)
			pcfg := receiver.Config{Concurrency: 64, MaxQueue: 1 << 20}
			if bc.cfg != nil {
				obs, err := telemetry.NewObserver(*bc.cfg)
				if err != nil {
					b.Fatal(err)
				}
				pcfg.Observer = obs
				pub = telemetry.Publisher(pub, *bc.cfg)
			}
			sub, err := mem.NewSubscriber(mem.SubscriberConfig{Broker: broker, Pipeline: pcfg}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = sub.Close() }()
			ch, err := sub.Subscribe(context.Background(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			const round = 256
			payload := []byte(`{"id":1}`)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += round {
				n := min(round, b.N-i)
				for j := range n {
					if err := pub.Publish("bench", message.NewMessage(strconv.Itoa(i+j), payload)); err != nil {
						b.Fatal(err)
					}
				}
				for range n {
					(<-ch).Ack()
				}
			}
		})
	}
}

// BenchmarkDelivering: the Observer's per-message work on the consumer side
// (extract, span start, finish with metrics), alone.
func BenchmarkDelivering(b *testing.B) {
	for _, bc := range benchConfigs(b) {
		if bc.cfg == nil {
			continue
		}
		b.Run(bc.name, func(b *testing.B) {
			obs, err := telemetry.NewObserver(*bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			msg := message.NewMessage("m1", []byte("x"))
			msg.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			msg.Metadata.Set(transport.MetadataPublishedAt, "2025-01-01T00:00:00.123456789Z")
			msg.Metadata.Set(transport.MetadataAttempt, "1")
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, finish := obs.Delivering(ctx, "orders", msg)
				finish(transport.OutcomeAcked)
			}
		})
	}
}

type discardPublisher struct{}

func (discardPublisher) Publish(string, ...*message.Message) error { return nil }
func (discardPublisher) Close() error                              { return nil }

// BenchmarkPublish: the decorator's per-message work on the producer side
// (send span, inject, publish time, metrics) over a publisher that discards.
func BenchmarkPublish(b *testing.B) {
	for _, bc := range benchConfigs(b) {
		b.Run(bc.name, func(b *testing.B) {
			var pub message.Publisher = discardPublisher{}
			if bc.cfg != nil {
				pub = telemetry.Publisher(pub, *bc.cfg)
			}
			payload := []byte("x")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := pub.Publish("orders", message.NewMessage("m1", payload)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
