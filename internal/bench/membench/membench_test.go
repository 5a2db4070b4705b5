package membench_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/internal/bench/membench"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRunSmall runs both floods at a small scale: with accounting on every
// message is handled once and the listener never holds more than MaxQueue
// plus one wave; with it off, the listener holds more than MaxQueue.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("floods a SQLite queue for several seconds")
	}
	cfg := membench.Config{
		Messages:       600,
		ArrivalRate:    1000,
		SlowFactor:     20, // 50 messages per second
		BatchSize:      10,
		MaxQueue:       60,
		SampleInterval: 20 * time.Millisecond,
		Dir:            t.TempDir(),
	}
	on, err := membench.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	logResult(t, on)
	if on.Metrics["lost"] != 0 || on.Metrics["duplicates"] != 0 || on.Messages != cfg.Messages {
		t.Errorf("accounting on: %d handled, lost %v, duplicates %v", on.Messages, on.Metrics["lost"], on.Metrics["duplicates"])
	}
	if peak := on.Metrics["peak_held_messages"]; peak > 60+64 {
		t.Errorf("accounting on: peak held %v, want ≤ MaxQueue + one wave", peak)
	}

	cfg.IgnoreBatchPending = true
	off, err := membench.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	logResult(t, off)
	if peak := off.Metrics["peak_held_messages"]; peak <= 60+64 {
		t.Errorf("accounting off: peak held %v, want more than MaxQueue + one wave", peak)
	}
	if off.Metrics["duplicates"] != 0 {
		t.Errorf("accounting off: %v duplicates", off.Metrics["duplicates"])
	}
}

func TestScenarioRegistered(t *testing.T) {
	for _, s := range bench.Scenarios() {
		if s.Name == membench.ScenarioName {
			return
		}
	}
	t.Fatalf("scenario %q not registered", membench.ScenarioName)
}

func logResult(t testing.TB, r bench.Result) {
	t.Helper()
	t.Logf("%s: %d messages in %s (%s)", r.Strategy, r.Messages, r.Duration.Round(time.Millisecond), r.Notes)
	for _, k := range []string{
		"preloaded", "published", "handled", "arrival_msg_per_s", "intake_msg_per_s", "handled_msg_per_s",
		"peak_held_messages", "peak_queue_count", "peak_goroutines",
		"baseline_heap_inuse_bytes", "peak_heap_inuse_bytes", "peak_heap_live_bytes",
		"peak_stack_bytes", "peak_rss_bytes", "target_heap_bytes",
		"bytes_per_held_msg_ratio", "bytes_per_held_msg_slope", "stack_bytes_per_held_msg_slope",
		"steady_heap_inuse_slope_bytes_per_s", "steady_heap_inuse_min_bytes", "steady_heap_inuse_max_bytes",
	} {
		if v, ok := r.Metrics[k]; ok {
			t.Logf("  %-38s %.0f", k, v)
		}
	}
}
