package sqlbench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/berth-go/berth/internal/bench"
)

// BenchmarkOrdered runs the sql/ordered scenario (PostgreSQL when
// BERTH_TEST_POSTGRES_URL is set, and SQLite) and prints its table;
// BERTH_BENCH_SCALE sets the size (default 0.25: a 5,000-message backlog).
func BenchmarkOrdered(b *testing.B) {
	scale := 0.25
	if s, err := strconv.ParseFloat(os.Getenv("BERTH_BENCH_SCALE"), 64); err == nil && s > 0 {
		scale = s
	}
	env := bench.Env{PostgresURL: os.Getenv("BERTH_TEST_POSTGRES_URL"), Scale: scale}
	fmt.Println()
	for range b.N {
		rs, err := RunOrdered(context.Background(), env)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rs {
			db := r.Database
			if db == "" {
				db = "postgres"
			}
			fmt.Printf("%-8s %-40s %6d msgs  %8.0f msg/s  %5.2f statements/msg  %5.3f claims/msg  %6.1f rows/claim  key gap p50 %.1f p99 %.1f ms  dead-letter gap p50 %.1f max %.1f ms  (%s)\n",
				db, r.Strategy, r.Messages, r.Metrics["msg_per_s"], r.Metrics["statements_per_msg"],
				r.Metrics["claims_per_msg"], r.Metrics["rows_per_claim"], r.Metrics["gap_p50_ms"], r.Metrics["gap_p99_ms"],
				r.Metrics["dl_gap_p50_ms"], r.Metrics["dl_gap_max_ms"], r.Notes)
		}
	}
}
