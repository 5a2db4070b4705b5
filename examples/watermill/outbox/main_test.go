package main

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/internal/testenv"
)

// TestEventsIfAndOnlyIfSaved: every saved user's event is forwarded to the
// target exactly once, and no rolled-back user's event is, on PostgreSQL
// and SQLite. The forwarder goes in commit order and the last sign-up is
// saved, so an event that escaped its rollback would have arrived before
// the run ends.
func TestEventsIfAndOnlyIfSaved(t *testing.T) {
	for _, db := range testenv.SQLDatabases {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := run(ctx, config{URL: testenv.SQLURL(t, db), TargetURL: "mem://outbox-" + watermill.NewShortUUID(), SignUps: 13, Every: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Saved) != 9 || len(res.RolledBak) != 4 {
				t.Fatalf("saved %d, rolled back %d; want 9 and 4", len(res.Saved), len(res.RolledBak))
			}
			if len(res.Events) != len(res.Saved) {
				t.Errorf("events of %d users forwarded, want the %d saved ones", len(res.Events), len(res.Saved))
			}
			for _, id := range res.Saved {
				if res.Events[id] != 1 {
					t.Errorf("saved user %s: %d events, want 1", id, res.Events[id])
				}
			}
			for _, id := range res.RolledBak {
				if res.Events[id] != 0 {
					t.Errorf("rolled-back user %s: %d events, want 0", id, res.Events[id])
				}
			}
		})
	}
}
