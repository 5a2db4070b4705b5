package membench_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/internal/bench/membench"
)

var (
	scale   = flag.Float64("membench.scale", 0.05, "fraction of the full flood (200,000 messages) the benchmark runs")
	jsonOut = flag.String("membench.json", "", "file to write the results to, as JSON")
	profile = flag.String("membench.heapprofile", "", "prefix of heap profiles to write (one per run)")
)

// BenchmarkBatchingMemory runs the flood with accounting on and off, in each
// Form (a router with a batching.Handler, batching.Consume, a router over a
// batching.Subscriber), at -membench.scale of the
// full 200,000 messages (0.05 by default; 1 for the documented run, which
// takes about eight minutes):
//
//	go test -run '^$' -bench . -timeout 30m ./internal/bench/membench/ -membench.scale=1
//
// Each run happens once whatever b.N is; the metrics are its peaks.
func BenchmarkBatchingMemory(b *testing.B) {
	n := max(int(membench.DefaultMessages**scale), 1000)
	var (
		mu      sync.Mutex
		results []bench.Result
	)
	// Runs with accounting on go first: a run without it leaves the heap
	// larger for good (the runtime never frees the g structs of its
	// goroutines), which would inflate the heap target of later runs.
	for _, acct := range []string{"on", "off"} {
		for _, mode := range []membench.Form{membench.FormRouter, membench.FormConsume, membench.FormBatches} {
			b.Run(string(mode)+"/accounting-"+acct, func(b *testing.B) {
				cfg := membench.Config{Messages: n, Form: mode, IgnoreBatchPending: acct == "off", Dir: b.TempDir()}
				if *profile != "" {
					cfg.HeapProfile = fmt.Sprintf("%s-%s-%s.pprof", *profile, mode, acct)
				}
				var r bench.Result
				for range b.N {
					var err error
					if r, err = membench.Run(context.Background(), cfg); err != nil {
						b.Fatal(err)
					}
				}
				logResult(b, r)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
				b.ReportMetric(r.Metrics["peak_heap_inuse_bytes"]/(1<<20), "peak-heap-MiB")
				b.ReportMetric(r.Metrics["peak_rss_bytes"]/(1<<20), "peak-rss-MiB")
				b.ReportMetric(r.Metrics["peak_held_messages"], "peak-held-msgs")
				b.ReportMetric(r.Metrics["bytes_per_held_msg_slope"], "B/held-msg")
			})
		}
	}
	if *jsonOut != "" {
		data, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(*jsonOut, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
