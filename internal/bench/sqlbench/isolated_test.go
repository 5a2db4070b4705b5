package sqlbench

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestIsolatedRun runs one configurable strategy run in a database of its
// own (RunIsolated) and prints its result as one JSON line; it is skipped
// unless BERTH_BENCH_RUN names the scenario ("steady" or "drain"). The
// issue-16 figures in docs/benchmarks.md come from it:
//
//	BERTH_BENCH_RUN=steady BERTH_BENCH_STRATEGY=berth BERTH_BENCH_INSTANCES=4 \
//	BERTH_BENCH_RATE=200 BERTH_BENCH_HANDLER=10ms BERTH_BENCH_DURATION=30s \
//	go test -run TestIsolatedRun -v ./internal/bench/sqlbench/
//
//	BERTH_BENCH_RUN=drain BERTH_BENCH_STRATEGY=limit BERTH_BENCH_INSTANCES=1 \
//	go test -run TestIsolatedRun -v ./internal/bench/sqlbench/
//
// BERTH_BENCH_POOL sets each instance's connections, BERTH_BENCH_BACKLOG a
// drain's messages.
func TestIsolatedRun(t *testing.T) {
	scenario := os.Getenv("BERTH_BENCH_RUN")
	if scenario == "" {
		t.Skip("BERTH_BENCH_RUN is not set (steady or drain)")
	}
	url := os.Getenv("BERTH_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("BERTH_TEST_POSTGRES_URL is not set")
	}
	env := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	dur := func(k, def string) time.Duration {
		d, err := time.ParseDuration(env(k, def))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	num := func(k, def string) float64 {
		f, err := strconv.ParseFloat(env(k, def), 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	rc := RunConfig{
		Strategy:    env("BERTH_BENCH_STRATEGY", StrategyBerth),
		Instances:   int(num("BERTH_BENCH_INSTANCES", "4")),
		Concurrency: int(num("BERTH_BENCH_CONCURRENCY", strconv.Itoa(SteadyConcurrency))),
		// Connections per instance (DefaultInstancePool when unset).
		InstancePool: int(num("BERTH_BENCH_POOL", "0")),
	}
	switch scenario {
	case "steady":
		rc.Scenario = ScenarioSteady
		rc.Handler = dur("BERTH_BENCH_HANDLER", "10ms")
		rc.Rate = num("BERTH_BENCH_RATE", "200")
		rc.Duration = dur("BERTH_BENCH_DURATION", "30s")
		rc.PublishBatch = 1
		rc.Grace = dur("BERTH_BENCH_GRACE", "10s")
	case "drain":
		rc.Scenario = ScenarioDrain
		rc.Handler = dur("BERTH_BENCH_HANDLER", "1ms")
		rc.Backlog = int(num("BERTH_BENCH_BACKLOG", strconv.Itoa(DrainBacklog)))
		rc.Timeout = dur("BERTH_BENCH_TIMEOUT", "5m")
	default:
		t.Fatalf("BERTH_BENCH_RUN=%q: want steady or drain", scenario)
	}
	res, err := RunIsolated(context.Background(), url, rc)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	t.Logf("RESULT %s", b)
}
