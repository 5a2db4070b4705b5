package main

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/internal/testenv"
)

// TestPrizesIfAndOnlyIfSaved: the prize sender receives every saved
// lottery's event exactly once, unwrapped from the forwarder's envelope on
// the broker's topic, and no rolled-back lottery's event, on PostgreSQL
// and SQLite. The forwarder reads the queue in commit order and the last
// lottery is saved, so an event that escaped its rollback would have
// arrived before the run ends.
func TestPrizesIfAndOnlyIfSaved(t *testing.T) {
	for _, db := range testenv.SQLDatabases {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := run(ctx, config{URL: testenv.SQLURL(t, db), TargetURL: "mem://forwarder-" + watermill.NewShortUUID(), Lotteries: 11, Every: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Saved) != 6 || len(res.RolledBack) != 5 {
				t.Fatalf("saved %d, rolled back %d; want 6 and 5", len(res.Saved), len(res.RolledBack))
			}
			if res.Enveloped != 0 {
				t.Errorf("%d messages reached the prize sender that were not the event (still enveloped?)", res.Enveloped)
			}
			if len(res.Prizes) != len(res.Saved) {
				t.Errorf("events of %d lotteries received, want the %d saved ones", len(res.Prizes), len(res.Saved))
			}
			for _, id := range res.Saved {
				if res.Prizes[id] != 1 {
					t.Errorf("saved lottery %d: %d events, want 1", id, res.Prizes[id])
				}
			}
			for _, id := range res.RolledBack {
				if res.Prizes[id] != 0 {
					t.Errorf("rolled-back lottery %d: %d events, want 0", id, res.Prizes[id])
				}
			}
		})
	}
}
