package main

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/testenv"
)

// TestEveryEventReachesEveryHandler is what the example shows: each event
// handler, a consumer group of its own, handles every event, and the
// command handlers every command, whichever router starts first and
// however late (up to 2 s after the first command), on PostgreSQL and
// SQLite. Each database runs several rounds with the start order drawn
// anew.
func TestEveryEventReachesEveryHandler(t *testing.T) {
	rounds := 3
	if testing.Short() {
		rounds = 1
	}
	for _, db := range testenv.SQLDatabases {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			for round := range rounds {
				starts := map[string]time.Duration{}
				for _, name := range append([]string{"commands"}, eventHandlers...) {
					starts[name] = time.Duration(rand.Int64N(int64(2 * time.Second)))
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				s, err := run(ctx, config{URL: testenv.SQLURL(t, db), Bookings: 5, Interval: 50 * time.Millisecond, Starts: starts})
				cancel()
				if err != nil {
					t.Fatalf("round %d (starts %v): %v; handled %v", round, starts, err, s.counts())
				}
				for h, n := range s.counts() {
					if n != 5 {
						t.Errorf("round %d (starts %v): %s handled %d rooms, want 5", round, starts, h, n)
					}
				}
				if s.report.totalCharge == 0 {
					t.Errorf("round %d: the financial report charged nothing", round)
				}
			}
		})
	}
}
