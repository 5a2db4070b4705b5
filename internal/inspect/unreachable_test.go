package inspect_test

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
	"github.com/berth-go/berth/transport/postgres"
)

// cannotSee checks that every read and action of s fails, none answering
// "nothing there": s's database cannot be reached.
func cannotSee(t *testing.T, s *inspect.SQL) {
	t.Helper()
	ctx := context.Background()
	if p, err := s.DeadLetterPage(ctx, inspect.Filter{}, "", 50); err == nil {
		t.Errorf("DeadLetterPage = %d rows, no error", len(p.DeadLetters))
	}
	if ds, err := s.DeadLetters(ctx, inspect.Filter{IDs: []string{"1"}}, 1); err == nil {
		t.Errorf("DeadLetters by id = %d rows, no error", len(ds))
	}
	if ds, err := s.DeadLetters(ctx, inspect.Filter{Queue: "orders"}, 0); err == nil {
		t.Errorf("DeadLetters of a queue = %d rows, no error", len(ds))
	}
	if ds, err := s.ReplayDelayed(ctx, inspect.Filter{}, 0); err == nil {
		t.Errorf("ReplayDelayed moved %d, no error", len(ds))
	}
	if ds, err := s.Purge(ctx, inspect.Filter{}, false); err == nil {
		t.Errorf("Purge deleted %d, no error", len(ds))
	}
	if ds, err := s.Purge(ctx, inspect.Filter{IDs: []string{"1"}}, false); err == nil {
		t.Errorf("Purge by id deleted %d, no error", len(ds))
	}
	if q, err := s.Queue(ctx, "orders"); err == nil {
		t.Errorf("Queue = %+v, no error", q)
	}
	if qs, err := s.Queues(ctx); err == nil {
		t.Errorf("Queues = %+v, no error", qs)
	}
	if _, _, err := s.Version(ctx); err == nil {
		t.Error("Version: no error")
	}
	if err := s.Ping(ctx); err == nil {
		t.Error("Ping: no error")
	}
}

// A database that stops answering (its pool closed under the inspector)
// makes every read and action fail: a dead letter is never reported gone,
// nor the error table empty, because the table could not be looked up.
func TestUnreachableDatabaseIsAnError(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		inspecttest.Seed(t, s, inspecttest.Queue{Topic: "orders", Ready: 1, Dead: []inspecttest.Dead{{Reason: "boom"}}})
		if err := s.DB.Close(); err != nil {
			t.Fatal(err)
		}
		cannotSee(t, s)
	})
}

// The same with a PostgreSQL URL whose port nothing listens on.
func TestNoServerIsAnError(t *testing.T) {
	const u = "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"
	s, err := inspect.PlanSQL(u)
	if err != nil {
		t.Fatal(err)
	}
	if s.DB, err = postgres.Open(u, 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.DB.Close() })
	cannotSee(t, s)
	if _, err := s.DeadLetterPage(context.Background(), inspect.Filter{}, "", 50); errors.Is(err, inspect.ErrBadCursor) {
		t.Errorf("DeadLetterPage: %v, want a connection error", err)
	}
}
