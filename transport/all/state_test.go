package all_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/health"
	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport"
)

// eventually polls cond until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// TestOpenedSubscriberReportsState: what OpenSubscriber returns goes as it
// is to health (AddSource, Check) and telemetry (RegisterSubscriber), and
// so does a batching.Subscriber over it.
func TestOpenedSubscriberReportsState(t *testing.T) {
	for _, u := range []string{
		"mem://state?concurrency=2&empty_delay=10ms",
		"sqlite://" + filepath.Join(t.TempDir(), "state.db") + "?concurrency=2&empty_delay=10ms",
	} {
		scheme, _, _ := strings.Cut(u, ":")
		t.Run(scheme, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sub, err := transport.OpenSubscriber(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			audit, err := batching.NewSubscriber(sub, batching.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer audit.Close()

			h, err := health.NewHandler(health.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if err := h.AddSource("orders", sub); err != nil {
				t.Fatal(err)
			}
			if err := h.AddSource("audit", audit); err != nil {
				t.Fatal(err)
			}
			check := health.Check("orders", sub)

			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer mp.Shutdown(context.Background())
			reg, err := telemetry.RegisterSubscriber(mp.Meter("test"), "orders", sub)
			if err != nil {
				t.Fatal(err)
			}
			defer reg.Unregister()

			topic := "state_" + watermill.NewShortUUID()
			if _, err := sub.Subscribe(ctx, topic); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a ready listener", func() bool {
				r := h.Report(ctx)
				return r.Ready && len(r.Listeners) == 2 && r.Listeners[0].Reason == health.ReasonOK
			})
			r := h.Report(ctx)
			for i, source := range []string{"orders", "audit"} {
				if l := r.Listeners[i]; l.Source != source || l.Name != topic {
					t.Errorf("listener %d: source %q name %q, want %q %q", i, l.Source, l.Name, source, topic)
				}
			}
			if err := check.Check(ctx); err != nil {
				t.Errorf("health.Check: %v", err)
			}

			var rm metricdata.ResourceMetrics
			if err := reader.Collect(ctx, &rm); err != nil {
				t.Fatal(err)
			}
			if !hasGauge(rm, telemetry.MetricQueueCount, topic) {
				t.Errorf("no %s gauge for listener %s in %+v", telemetry.MetricQueueCount, topic, rm)
			}
		})
	}
}

// hasGauge reports whether rm holds a data point of the int64 gauge (or
// up-down counter) name with an attribute whose value is listener (whatever
// its instrument kind and key: that is telemetry's business).
func hasGauge(rm metricdata.ResourceMetrics, name, listener string) bool {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			var points []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			case metricdata.Sum[int64]:
				points = d.DataPoints
			}
			for _, dp := range points {
				for _, kv := range dp.Attributes.ToSlice() {
					if kv.Value == attribute.StringValue(listener) {
						return true
					}
				}
			}
		}
	}
	return false
}
