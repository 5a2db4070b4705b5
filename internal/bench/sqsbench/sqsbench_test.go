package sqsbench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// benchEnv is the scenario environment of the Go benchmarks: the emulator
// from BERTH_TEST_SQS_ENDPOINT and BERTH_BENCH_SCALE (default 0.1: a
// 1,000-message backlog, 6 s of steady arrivals, a 20 s idle window).
func benchEnv(b *testing.B) *runEnv {
	b.Helper()
	scale := 0.1
	if v := os.Getenv("BERTH_BENCH_SCALE"); v != "" {
		var err error
		if scale, err = strconv.ParseFloat(v, 64); err != nil || scale <= 0 {
			b.Fatalf("BERTH_BENCH_SCALE=%q: want a positive number", v)
		}
	}
	e, err := newRunEnv(bench.Env{SQSEndpoint: testenv.SQSEndpoint(b), Scale: scale})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.close)
	return e
}

// report adds a result's main metrics to the benchmark output and logs all
// of them.
func report(b *testing.B, r bench.Result, units map[string]string) {
	b.Helper()
	for _, k := range slices.Sorted(maps.Keys(units)) {
		if v, ok := r.Metrics[k]; ok {
			b.ReportMetric(v, units[k])
		}
	}
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(r.Metrics)) {
		fmt.Fprintf(&sb, " %s=%.4g", k, r.Metrics[k])
	}
	b.Logf("%s %s: %d messages in %s;%s (%s)", r.Scenario, r.Strategy, r.Messages, r.Duration, sb.String(), r.Notes)
}

// BenchmarkBacklog consumes a backlog with each library (1,000 messages at
// the default scale; BERTH_BENCH_SCALE=1 for the documented 10,000):
//
//	go test -run '^$' -bench Backlog -benchtime 1x ./internal/bench/sqsbench/
func BenchmarkBacklog(b *testing.B) {
	e := benchEnv(b)
	for _, st := range Strategies {
		b.Run(st.Name, func(b *testing.B) {
			var r bench.Result
			for b.Loop() {
				var err error
				if r, err = backlog(context.Background(), e, st); err != nil {
					b.Fatal(err)
				}
			}
			report(b, r, map[string]string{
				"msg_per_s":                  "msg/s",
				"requests_per_consumed_msg":  "req/consumed",
				"requests_per_published_msg": "req/published",
			})
		})
	}
}

// BenchmarkSteady runs steady arrivals (100 msg/s, one message per
// Publish call) for 6 s at the default scale.
func BenchmarkSteady(b *testing.B) {
	e := benchEnv(b)
	for _, st := range Strategies {
		b.Run(st.Name, func(b *testing.B) {
			var r bench.Result
			for b.Loop() {
				var err error
				if r, err = steady(context.Background(), e, st); err != nil {
					b.Fatal(err)
				}
			}
			report(b, r, map[string]string{
				"requests_per_consumed_msg":  "req/consumed",
				"requests_per_published_msg": "req/published",
				"p99_ms":                     "p99-ms",
			})
		})
	}
}

// BenchmarkIdle watches empty queues with both libraries at once for one
// 20 s window at the default scale (a minute at scale 1).
func BenchmarkIdle(b *testing.B) {
	e := benchEnv(b)
	var rs []bench.Result
	for b.Loop() {
		var err error
		if rs, err = idleAll(context.Background(), e, Strategies...); err != nil {
			b.Fatal(err)
		}
	}
	for _, r := range rs {
		b.ReportMetric(r.Metrics["requests_per_minute_idle"], r.Strategy+"-req/min")
		b.ReportMetric(r.Metrics["outstanding_long_polls"], r.Strategy+"-polls")
		report(b, r, nil)
	}
}

// BenchmarkPublishSequential publishes one message per Publish call from
// one goroutine (300 messages at the default scale) with each of
// PublishStrategies, BERTH_BENCH_ROUNDS times (default 3) in rotated order
// so that load drifts and warm-up touch each alike, and reports each
// strategy's median:
//
//	go test -run '^$' -bench PublishSequential -benchtime 1x ./internal/bench/sqsbench/
func BenchmarkPublishSequential(b *testing.B) {
	benchRounds(b, publishSequential, "publish_msg_per_s", "msg/s", "requests_per_published_msg", "req/published", "p99_ms", "p99-ms")
}

// BenchmarkPublishConcurrent publishes 1,000 msg/s, one message per
// Publish call from 8 producers, for 5 s at the default scale, rounds as
// BenchmarkPublishSequential.
func BenchmarkPublishConcurrent(b *testing.B) {
	benchRounds(b, publishConcurrent, "requests_per_published_msg", "req/published", "p99_ms", "p99-ms", "rtt_p99_ms", "rtt-p99-ms", "msg_per_s", "msg/s")
}

// benchRounds runs scenario for each of PublishStrategies in rotated
// order, BERTH_BENCH_ROUNDS times, and reports the median of each metric
// named in pairs (metric, unit) per strategy.
func benchRounds(b *testing.B, scenario func(context.Context, *runEnv, Strategy) (bench.Result, error), metricUnits ...string) {
	e := benchEnv(b)
	rounds := 3
	if v := os.Getenv("BERTH_BENCH_ROUNDS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			b.Fatalf("BERTH_BENCH_ROUNDS=%q: want a positive integer", v)
		}
	}
	results := map[string][]bench.Result{}
	for b.Loop() {
		for r := range rounds {
			for i := range PublishStrategies {
				st := PublishStrategies[(i+r)%len(PublishStrategies)]
				res, err := scenario(context.Background(), e, st)
				if err != nil {
					b.Fatal(err)
				}
				results[st.Name] = append(results[st.Name], res)
				report(b, res, nil)
			}
		}
	}
	for _, st := range PublishStrategies {
		for i := 0; i+1 < len(metricUnits); i += 2 {
			var vs []float64
			for _, r := range results[st.Name] {
				vs = append(vs, r.Metrics[metricUnits[i]])
			}
			slices.Sort(vs)
			b.ReportMetric(vs[len(vs)/2], st.Name+"-"+metricUnits[i+1])
		}
	}
}

func TestCounter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	var c Counter
	client := &http.Client{Transport: &c}
	send := func(target string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if target != "" {
			req.Header.Set("X-Amz-Target", target)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { send("AmazonSQS.ReceiveMessage") })
	}
	wg.Wait()
	send("AmazonSQS.DeleteMessageBatch")
	send("")
	want := map[string]int64{"ReceiveMessage": 5, "DeleteMessageBatch": 1, "other": 1}
	if got := c.Counts(); !maps.Equal(got, want) {
		t.Fatalf("counts = %v, want %v", got, want)
	}
	if got := c.Total(); got != 7 {
		t.Fatalf("total = %d, want 7", got)
	}
	if p := c.Peak("ReceiveMessage"); p < 1 || p > 5 {
		t.Fatalf("peak = %d, want 1..5", p)
	}
	c.Reset()
	if got := c.Total(); got != 0 || c.Peak("ReceiveMessage") != 0 {
		t.Fatalf("after Reset: total %d, peak %d", got, c.Peak("ReceiveMessage"))
	}
	client.CloseIdleConnections()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

func TestScenariosRegistered(t *testing.T) {
	var names []string
	for _, s := range bench.Scenarios() {
		names = append(names, s.Name)
	}
	for _, want := range []string{ScenarioBacklog, ScenarioSteady, ScenarioIdle, ScenarioPublishSequential, ScenarioPublishConcurrent} {
		if !slices.Contains(names, want) {
			t.Errorf("scenario %s not registered (have %v)", want, names)
		}
	}
}

func TestQuantile(t *testing.T) {
	if got := quantile(nil, 0.5); got != 0 {
		t.Fatalf("quantile(nil) = %v", got)
	}
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{0: time.Millisecond, 0.5: 50 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond} {
		if got := quantile(ds, q); got != want {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
}
