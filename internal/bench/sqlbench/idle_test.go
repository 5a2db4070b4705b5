package sqlbench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

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
