package inspect_test

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
	"github.com/berth-go/berth/transport"
)

// Pause and Resume by topic or table name, shown by Queues and Queue;
// repeated actions report no change; an unknown queue is ErrQueueNotFound.
func TestPauseResume(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		ctx := context.Background()
		names := inspecttest.Seed(t, s, inspecttest.Queue{Topic: "orders", Ready: 1}, inspecttest.Queue{Topic: "emails"})
		if ls, now, err := s.Listeners(ctx); err != nil || len(ls) != 0 || !now.IsZero() {
			t.Fatalf("no fleet table yet: %v, %v, %v", ls, now, err)
		}
		q, changed, err := s.Pause(ctx, "orders", "ops: incident 7")
		if err != nil || !changed || q != names[0] {
			t.Fatalf("pause: %q, %v, %v", q, changed, err)
		}
		if _, changed, err := s.Pause(ctx, names[0], "again"); err != nil || changed {
			t.Fatalf("second pause: %v, %v", changed, err)
		}
		qs, err := s.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range qs {
			if st.Paused != (st.Queue == names[0]) {
				t.Errorf("%s: paused = %v", st.Queue, st.Paused)
			}
			if st.Paused && st.PausedBy != "ops: incident 7" {
				t.Errorf("paused by %q", st.PausedBy)
			}
		}
		if one, err := s.Queue(ctx, "orders"); err != nil || !one.Paused {
			t.Fatalf("Queue: %+v, %v", one, err)
		}
		if _, _, err := s.Pause(ctx, "nope", ""); !errors.Is(err, transport.ErrQueueNotFound) {
			t.Fatalf("pause of an unknown queue: %v", err)
		}
		if q, changed, err := s.Resume(ctx, "orders"); err != nil || !changed || q != names[0] {
			t.Fatalf("resume: %q, %v, %v", q, changed, err)
		}
		if _, changed, err := s.Resume(ctx, "orders"); err != nil || changed {
			t.Fatalf("second resume: %v, %v", changed, err)
		}
		if one, _ := s.Queue(ctx, "orders"); one.Paused {
			t.Fatal("still paused after resume")
		}
	})
}
