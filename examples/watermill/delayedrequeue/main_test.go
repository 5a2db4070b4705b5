package main

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/berth-go/berth/internal/testenv"
)

// TestFailedOrderRequeuedWithGrowingDelay: the order without an id comes
// back through the requeue topic once per failure, each time no earlier
// than DelayOnError's delay for it (2 s, then 4 s: the delay doubles) and
// soon after it (within the idle loop's empty delay, 1 s, plus a margin
// for a loaded machine), with the requeuer's count on it; the other orders
// are handled once each, on PostgreSQL and SQLite.
//
// The requeuer publishes the message back with the delay metadata
// DelayOnError set; Berth stored the due time it read from it
// (berth_watermill_due), so the message is not delayed again.
// BERTH_EXAMPLE_REQUEUE_INITIAL sets the first delay to try another
// (500ms: runs 520–530 ms, then 1.03 s apart, on 2026-12-07; 1.96 s, then
// 1 s, when the second publish read the pair as just set).
func TestFailedOrderRequeuedWithGrowingDelay(t *testing.T) {
	initial := 2 * time.Second
	if d, err := time.ParseDuration(os.Getenv("BERTH_EXAMPLE_REQUEUE_INITIAL")); err == nil {
		initial = d
	}
	for _, db := range testenv.SQLDatabases {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			const orders, badAt, runs = 6, 3, 3
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := config{URL: testenv.SQLURL(t, db), Orders: orders, Every: 20 * time.Millisecond, BadAt: badAt, Attempts: runs,
				Retry: middleware.DelayOnError{InitialInterval: initial, MaxInterval: 4 * initial, Multiplier: 2}}
			attempts, err := run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var bad []attempt
			handled := map[int]int{}
			for _, a := range attempts {
				handled[a.Seq]++
				if a.Seq == badAt-1 {
					bad = append(bad, a)
				}
			}
			for seq := range orders {
				if (seq+1)%badAt != 0 && handled[seq] != 1 {
					t.Errorf("order %d was handled %d times, want once", seq, handled[seq])
				}
			}
			want := initial
			for i := 1; i < len(bad) && i < runs; i++ {
				gap := bad[i].At.Sub(bad[i-1].At)
				if gap < want || gap > want+3*time.Second {
					t.Errorf("run %d of the order without an id came %s after run %d, want %s to %s", i+1, gap, i, want, want+3*time.Second)
				}
				if bad[i].Retries != i {
					t.Errorf("run %d carries %s=%d, want %d", i+1, "_watermill_requeuer_retries", bad[i].Retries, i)
				}
				want = min(want*2, cfg.Retry.MaxInterval)
			}
			t.Logf("runs of the order without an id: %s", gaps(bad))
		})
	}
}

// gaps formats the times between successive runs.
func gaps(as []attempt) string {
	s := ""
	for i := 1; i < len(as); i++ {
		s += " +" + as[i].At.Sub(as[i-1].At).Round(10*time.Millisecond).String() + " (retries " + strconv.Itoa(as[i].Retries) + ")"
	}
	return s
}
