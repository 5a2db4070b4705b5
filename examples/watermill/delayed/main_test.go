package main

import (
	"context"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/testenv"
)

// TestFeedbackFormsWaitTheirDelay: every delayed command arrives no
// earlier than its delay (measured from the send, in the event handler)
// and soon after it (within the idle loop's empty delay, 1 s, plus a
// margin for a loaded machine), on PostgreSQL and SQLite. Before Berth read
// Watermill's delay metadata, they arrived at once.
func TestFeedbackFormsWaitTheirDelay(t *testing.T) {
	for _, db := range testenv.SQLDatabases {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			const wait = 1500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			arrivals, err := run(ctx, config{URL: testenv.SQLURL(t, db), Orders: 4, Every: 100 * time.Millisecond, Delay: wait})
			if err != nil {
				t.Fatal(err)
			}
			for id, a := range arrivals {
				took := a.ReceivedAt.Sub(a.SentAt)
				if took < wait || took > wait+3*time.Second {
					t.Errorf("order %s: the feedback form came %s after it was sent, want %s to %s", id, took, wait, wait+3*time.Second)
				}
			}
		})
	}
}
