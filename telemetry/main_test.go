package telemetry_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/berth-go/berth/telemetry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The AWS SDK's HTTP transport keeps idle keep-alive connections.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// rig holds an SDK tracer provider with an in-memory exporter and a meter
// provider with a manual reader.
type rig struct {
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newRig(t testing.TB) *rig {
	r := &rig{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	r.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		_ = r.tp.Shutdown(context.Background())
		_ = r.mp.Shutdown(context.Background())
	})
	return r
}

func (r *rig) config() telemetry.Config {
	return telemetry.Config{TracerProvider: r.tp, MeterProvider: r.mp}
}

// span returns the ended span called name, waiting for it.
func (r *rig) span(t testing.TB, name string) tracetest.SpanStub {
	t.Helper()
	var found tracetest.SpanStub
	eventually(t, "span "+name, func() bool {
		for _, s := range r.spans.GetSpans() {
			if s.Name == name {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

// spansNamed returns the ended spans called name, waiting for n of them.
func (r *rig) spansNamed(t testing.TB, name string, n int) []tracetest.SpanStub {
	t.Helper()
	var out []tracetest.SpanStub
	eventually(t, fmt.Sprintf("%d spans %s", n, name), func() bool {
		out = out[:0]
		for _, s := range r.spans.GetSpans() {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return len(out) >= n
	})
	return out
}

// collect reads every metric.
func (r *rig) collect(t testing.TB) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// point is one data point of any kind, flattened.
type point struct {
	attrs attribute.Set
	value float64 // sum or gauge value, or histogram sum
	count uint64  // histogram count
}

// find returns the metric called name, or false.
func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

func points(m metricdata.Metrics) []point {
	var out []point
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, value: float64(p.Value)})
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, value: float64(p.Value)})
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, value: p.Sum, count: p.Count})
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, value: float64(p.Sum), count: p.Count})
		}
	}
	return out
}

// value sums the points of name whose attributes include every kv; ok is
// false when no point matches.
func value(rm metricdata.ResourceMetrics, name string, kvs ...attribute.KeyValue) (sum float64, count uint64, ok bool) {
	m, found := find(rm, name)
	if !found {
		return 0, 0, false
	}
	for _, p := range points(m) {
		match := true
		for _, kv := range kvs {
			if v, has := p.attrs.Value(kv.Key); !has || v != kv.Value {
				match = false
				break
			}
		}
		if match {
			sum += p.value
			count += p.count
			ok = true
		}
	}
	return sum, count, ok
}

// eventually waits for cond, polling, failing after 10 seconds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// receive returns the next message of ch, failing after 10 seconds.
func receive(t testing.TB, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a message")
	}
	return nil
}

var topicSeq atomic.Int64

func uniqueTopic(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, topicSeq.Add(1))
}

func attr(s tracetest.SpanStub, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
