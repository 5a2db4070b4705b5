package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/bench"
)

func init() {
	bench.Register(bench.Scenario{
		Name:        "test/fake",
		Description: "a registered scenario for the command's tests",
		Run: func(ctx context.Context, env bench.Env) ([]bench.Result, error) {
			var rs []bench.Result
			for i, n := range []int{1, 2, 4} {
				env.Progress(float64(i)/3, "instances "+string(rune('0'+n)))
				for _, s := range []string{"berth", "baseline"} {
					rs = append(rs, bench.Result{
						Strategy: s, Instances: n, Messages: 1000 * n, Duration: time.Second,
						Metrics: map[string]float64{"msg_per_s": float64(1000*n) * env.Scale, "round_trips_per_msg": 0.5},
						Series: map[string][]bench.Point{
							"heap_inuse_bytes": {{At: 0, Value: 1 << 20}, {At: time.Second, Value: 3 << 20}},
							"rss_bytes":        {{At: 0, Value: 8 << 20}, {At: time.Second, Value: 9 << 20}},
						},
					})
				}
			}
			return rs, nil
		},
	})
	bench.Register(bench.Scenario{
		Name: "test/needs-nothing-here", Needs: []string{"sqs"},
		Run: func(context.Context, bench.Env) ([]bench.Result, error) { panic("must be skipped") },
	})
}

func TestBenchWritesResultsAndCharts(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCmd(t, "bench", "--scenario", "test/fake", "--scenario", "test/needs-nothing-here", "--scale", "0.5", "--out", dir, "--sqs-endpoint", "")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(errs, "skip test/needs-nothing-here: needs sqs") || !strings.Contains(errs, "100%") {
		t.Fatalf("stderr lacks the skip message or the progress bar:\n%s", errs)
	}
	var f benchFile
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Results) != 6 || f.Results[0].Scenario != "test/fake" || f.Scale != 0.5 {
		t.Fatalf("results.json: %+v", f)
	}
	for _, name := range []string{"test-fake-throughput.svg", "test-fake-round-trips.svg", "test-fake-heap.svg", "test-fake-rss.svg"} {
		svg, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "baseline") {
			t.Fatalf("%s is not the expected chart:\n%s", name, svg)
		}
	}
	// Redraw from results.json alone.
	for _, n := range []string{"test-fake-throughput.svg"} {
		_ = os.Remove(filepath.Join(dir, n))
	}
	mustRun(t, "bench", "--charts-only", "--out", dir)
	if _, err := os.Stat(filepath.Join(dir, "test-fake-throughput.svg")); err != nil {
		t.Fatal(err)
	}
}

func TestBenchList(t *testing.T) {
	out := mustRun(t, "bench", "--list")
	if !strings.Contains(out, "test/fake") || !strings.Contains(out, "needs: sqs") {
		t.Fatalf("--list:\n%s", out)
	}
}
