package inspect_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
	"github.com/berth-go/berth/internal/testenv"
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

// noReadRole returns the URL of a fresh PostgreSQL role that may use the
// schema of schemaURL but read none of its tables (dropped at cleanup): a
// database that answers, and hides the tables from the catalog too.
func noReadRole(t *testing.T, schemaURL, schema string) string {
	t.Helper()
	admin, err := postgres.Open(testenv.PostgresURL(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	role := testenv.UniqueName("berth_noread")
	for _, q := range []string{
		"CREATE ROLE " + pgx.Identifier{role}.Sanitize() + " LOGIN",
		"GRANT USAGE ON SCHEMA " + pgx.Identifier{schema}.Sanitize() + " TO " + pgx.Identifier{role}.Sanitize(),
	} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{"DROP OWNED BY " + pgx.Identifier{role}.Sanitize(), "DROP ROLE " + pgx.Identifier{role}.Sanitize()} {
			if _, err := admin.Exec(q); err != nil {
				t.Error(err)
			}
		}
		_ = admin.Close()
	})
	u, err := url.Parse(schemaURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// A role that may not read the tables: the database answers, but every
// dead-letter read and action fails (permission denied) rather than
// reading as an empty error table, though the catalog shows the role no
// table either.
func TestNoPrivilegeIsAnError(t *testing.T) {
	schemaURL, schema := testenv.PostgresSchema(t)
	seed, err := inspect.OpenSQL(context.Background(), schemaURL)
	if err != nil {
		t.Fatal(err)
	}
	inspecttest.Seed(t, seed, inspecttest.Queue{Topic: "orders", Ready: 1, Dead: []inspecttest.Dead{{Reason: "boom"}}})
	_ = seed.Close()
	s, err := inspect.OpenSQL(context.Background(), noReadRole(t, schemaURL, schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	if p, err := s.DeadLetterPage(ctx, inspect.Filter{}, "", 50); err == nil {
		t.Errorf("DeadLetterPage = %d rows, no error", len(p.DeadLetters))
	}
	if ds, err := s.DeadLetters(ctx, inspect.Filter{IDs: []string{"1"}}, 1); err == nil {
		t.Errorf("DeadLetters by id = %d rows, no error", len(ds))
	}
	if ds, err := s.ReplayDelayed(ctx, inspect.Filter{}, 0); err == nil {
		t.Errorf("ReplayDelayed moved %d, no error", len(ds))
	}
	if ds, err := s.Purge(ctx, inspect.Filter{IDs: []string{"1"}}, false); err == nil {
		t.Errorf("Purge deleted %d, no error", len(ds))
	}
	if _, _, err := s.Version(ctx); err == nil {
		t.Error("Version: no error")
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
}
