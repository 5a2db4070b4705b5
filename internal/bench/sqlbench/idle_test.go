package sqlbench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/internal/testenv"
)

// BenchmarkIdle runs the idle scenario: BERTH_IDLE_QUEUES (50) queues ×
// BERTH_IDLE_INSTANCES (3) instances listening, nothing published for
// BERTH_IDLE_WINDOW (60s) after BERTH_IDLE_WARMUP (30s), on PostgreSQL
// (BERTH_TEST_POSTGRES_URL) and on SQLite; BERTH_IDLE_PROBE_MAX sets
// IdleProbeMax (-1ns: every source polls, the behaviour before the shared
// probe); BERTH_IDLE_CONNS (4) and BERTH_IDLE_IDLE_CONNS (0: the pool's;
// negative: none) size each instance's pool. It reports the database's transactions per second, per listener,
// connections, and the first-message latency after idle:
//
//	go test -run '^$' -bench Idle -benchtime 1x -timeout 30m ./internal/bench/sqlbench/
func BenchmarkIdle(b *testing.B) {
	cfg := IdleConfig{
		Queues:       envInt(b, "BERTH_IDLE_QUEUES", 50),
		Instances:    envInt(b, "BERTH_IDLE_INSTANCES", 3),
		Conns:        envInt(b, "BERTH_IDLE_CONNS", 4),
		IdleConns:    envIntAny(b, "BERTH_IDLE_IDLE_CONNS", 0),
		Warmup:       envDuration(b, "BERTH_IDLE_WARMUP", 30*time.Second),
		Window:       envDuration(b, "BERTH_IDLE_WINDOW", time.Minute),
		IdleProbeMax: envDuration(b, "BERTH_IDLE_PROBE_MAX", 0),
		SkipLatency:  os.Getenv("BERTH_IDLE_SKIP_LATENCY") != "",
	}
	for _, db := range []string{"postgres", "sqlite"} {
		if only := os.Getenv("BERTH_IDLE_DB"); only != "" && only != db {
			continue
		}
		b.Run(db, func(b *testing.B) {
			c := cfg
			if db == "postgres" {
				c.URL = testenv.PostgresURL(b)
			} else {
				c.URL, c.Dir = "sqlite", b.TempDir()
			}
			var r IdleResult
			for b.Loop() {
				var err error
				if r, err = RunIdle(context.Background(), c); err != nil {
					b.Fatal(err)
				}
			}
			b.Log(r)
			b.ReportMetric(r.TxPerSec, "tx/s")
			b.ReportMetric(r.PerListener, "tx/s/listener")
			b.ReportMetric(float64(r.Connections), "conns")
			b.ReportMetric(float64(r.NotifyP99.Microseconds())/1000, "notify_p99_ms")
			b.ReportMetric(float64(r.LocalP99.Microseconds())/1000, "local_p99_ms")
		})
	}
}

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(tb testing.TB, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		tb.Fatalf("%s=%q: want a duration", name, v)
	}
	return d
}

func envIntAny(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		tb.Fatalf("%s=%q: want an integer", name, v)
	}
	return n
}

// Scale shortens the idle scenario's warm-up, window and settle, down to
// their floors; the queue and instance counts stay.
func TestIdleConfigs(t *testing.T) {
	full := IdleConfigs("postgres://x", 1)
	if len(full) != len(IdleInstances) {
		t.Fatalf("%d configs, want one per instance count %v", len(full), IdleInstances)
	}
	for i, c := range full {
		if c.URL != "postgres://x" || c.Queues != IdleQueues || c.Instances != IdleInstances[i] ||
			c.Warmup != IdleWarmup || c.Window != IdleWindow || c.Settle != 20*time.Second || c.SkipLatency {
			t.Fatalf("full size, config %d: %+v", i, c)
		}
	}
	half := IdleConfigs("postgres://x", 0.5)[0]
	if half.Warmup != 15*time.Second || half.Window != 30*time.Second || half.Settle != 10*time.Second || half.Queues != IdleQueues {
		t.Fatalf("scale 0.5: %+v", half)
	}
	tiny := IdleConfigs("postgres://x", 0.001)[1]
	if tiny.Warmup != time.Second || tiny.Window != 2*time.Second || tiny.Settle != time.Second || tiny.Instances != IdleInstances[1] {
		t.Fatalf("scale 0.001: %+v", tiny)
	}
}

// The registered sql/idle runs RunIdle for each instance count and reports
// what it measured, with progress.
func TestRunIdleScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: PostgreSQL")
	}
	env := bench.Env{PostgresURL: testenv.PostgresURL(t), Scale: 0.01}
	var last float64
	env.Progress = func(f float64, status string) {
		if f < last {
			t.Errorf("progress went back from %v to %v (%s)", last, f, status)
		}
		last = f
	}
	rs, err := RunIdleScenario(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(IdleInstances) || last != 1 {
		t.Fatalf("%d results, progress %v; want %d, 1", len(rs), last, len(IdleInstances))
	}
	for i, r := range rs {
		m := r.Metrics
		// Over a 2 s window the count may be 0 (backends report their
		// counts when idle, at most every second): only its presence is
		// checked.
		if _, ok := m["tx_per_s"]; !ok {
			t.Errorf("result %d has no tx_per_s", i)
		}
		t.Logf("%d instance(s): %s", r.Instances, r.Notes)
		if r.Scenario != ScenarioIdle || r.Strategy != StrategyBerth || r.Instances != IdleInstances[i] ||
			m["listeners"] != float64(IdleQueues*IdleInstances[i]) || m["connections"] < float64(IdleInstances[i]) ||
			m["notify_p99_ms"] <= 0 || m["local_p99_ms"] <= 0 {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	if _, err := RunIdleScenario(context.Background(), bench.Env{Scale: 0.01}); err == nil {
		t.Fatal("RunIdleScenario without PostgreSQL: no error")
	}
}
