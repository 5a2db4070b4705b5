package testenv_test

import (
	"context"
	"database/sql"
	"flag"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

func TestUniqueName(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for _, prefix := range []string{
		"orders", "", "Orders-Queue.fifo", "9lives", "_x", "naïve",
		strings.Repeat("long", 40),
	} {
		for range 100 {
			n := testenv.UniqueName(prefix)
			if !namePattern.MatchString(n) {
				t.Errorf("UniqueName(%q) = %q, want it to match %s", prefix, n, namePattern)
			}
			if len(n) > testenv.MaxNameLen {
				t.Errorf("UniqueName(%q) = %q is %d characters, want at most %d", prefix, n, len(n), testenv.MaxNameLen)
			}
			if seen[n] {
				t.Errorf("UniqueName(%q) returned %q twice", prefix, n)
			}
			seen[n] = true
		}
	}
	if n := testenv.UniqueName("orders"); !strings.HasPrefix(n, "orders_") {
		t.Errorf("UniqueName(%q) = %q, want prefix %q", "orders", n, "orders_")
	}
	if n := testenv.UniqueName("Orders-Queue"); !strings.HasPrefix(n, "orders_queue_") {
		t.Errorf("UniqueName(%q) = %q, want prefix %q", "Orders-Queue", n, "orders_queue_")
	}
}

func TestWithSearchPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:5432/test?search_path=s1&sslmode=disable"},
		{"postgresql://u:p@h/db", "postgresql://u:p@h/db?search_path=s1"},
		{"postgres://h/db?search_path=old", "postgres://h/db?search_path=s1"},
		{"host=127.0.0.1 dbname=test", "host=127.0.0.1 dbname=test search_path='s1'"},
	} {
		got, err := testenv.WithSearchPath(tc.in, "s1")
		if err != nil {
			t.Errorf("WithSearchPath(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("WithSearchPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
		// Both forms must parse to a search_path run-time parameter.
		cfg, err := pgx.ParseConfig(got)
		if err != nil {
			t.Errorf("pgx.ParseConfig(%q): %v", got, err)
			continue
		}
		if sp := cfg.RuntimeParams["search_path"]; sp != "s1" {
			t.Errorf("pgx.ParseConfig(%q) search_path = %q, want %q", got, sp, "s1")
		}
	}
}

// fakeTB records Skip and Fatal calls. Like the real ones, they end the
// calling goroutine, so helpers run in their own goroutine through call.
type fakeTB struct {
	testing.TB
	mu              sync.Mutex
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skipped, f.msg = true, format
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed, f.msg = true, format
	f.mu.Unlock()
	runtime.Goexit()
}

func call(tb testing.TB, fn func(testing.TB) string) (f *fakeTB, got string) {
	f = &fakeTB{TB: tb}
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = fn(f)
	}()
	<-done
	return f, got
}

func TestMissingServices(t *testing.T) {
	// No t.Parallel: t.Setenv.
	if testing.Short() {
		t.Skip("in -short mode every helper skips; see TestShortModeSkips")
	}
	for _, tc := range []struct {
		name      string
		env       string
		fn        func(testing.TB) string
		mandatory bool
	}{
		{"postgres", testenv.EnvPostgresURL, testenv.PostgresURL, true},
		{"postgres schema", testenv.EnvPostgresURL, testenv.PostgresSchemaURL, true},
		{"sqs", testenv.EnvSQSEndpoint, testenv.SQSEndpoint, true},
		{"sqs config", testenv.EnvSQSEndpoint, func(tb testing.TB) string { return testenv.SQSConfig(tb).Endpoint }, true},
		{"sqlserver", testenv.EnvSQLServerURL, testenv.SQLServerURL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, "")

			t.Setenv(testenv.EnvCI, "")
			f, _ := call(t, tc.fn)
			if !f.skipped || f.failed {
				t.Errorf("without CI: skipped=%v failed=%v, want a skip", f.skipped, f.failed)
			}

			t.Setenv(testenv.EnvCI, "true")
			f, _ = call(t, tc.fn)
			if tc.mandatory && (!f.failed || f.skipped) {
				t.Errorf("under CI=true: skipped=%v failed=%v, want a failure", f.skipped, f.failed)
			}
			if !tc.mandatory && (!f.skipped || f.failed) {
				t.Errorf("under CI=true: skipped=%v failed=%v, want a skip", f.skipped, f.failed)
			}

			t.Setenv(tc.env, "scheme://set")
			if tc.name == "postgres schema" {
				return // would connect
			}
			f, got := call(t, tc.fn)
			if f.skipped || f.failed || got != "scheme://set" {
				t.Errorf("when set: got %q, skipped=%v failed=%v", got, f.skipped, f.failed)
			}
		})
	}
}

func TestShortModeSkips(t *testing.T) {
	if testing.Short() {
		t.Skip("already in -short mode")
	}
	t.Setenv(testenv.EnvSQSEndpoint, "http://127.0.0.1:1")
	t.Setenv(testenv.EnvCI, "true")
	if err := flag.Set("test.short", "true"); err != nil {
		t.Fatal(err)
	}
	defer flag.Set("test.short", "false")
	f, _ := call(t, testenv.SQSEndpoint)
	if !f.skipped || f.failed {
		t.Errorf("in -short mode: skipped=%v failed=%v, want a skip", f.skipped, f.failed)
	}
}

func TestSQSConfigDefaults(t *testing.T) {
	t.Setenv(testenv.EnvSQSEndpoint, "http://127.0.0.1:1")
	t.Setenv("AWS_REGION", "")
	got := testenv.SQSConfig(t)
	want := testenv.SQS{Endpoint: "http://127.0.0.1:1", Region: "us-east-1", AccessKeyID: "test", SecretAccessKey: "test"}
	if got != want {
		t.Errorf("SQSConfig = %+v, want %+v", got, want)
	}
}

// TestPostgresSchemaIsolates checks that a table created through one schema
// URL is invisible through another, with every way Berth connects (pgx.Conn,
// pgxpool and database/sql), and that the schema is gone after cleanup.
func TestPostgresSchemaIsolates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := testenv.PostgresURL(t)

	var nameA string
	t.Run("isolated", func(t *testing.T) {
		urlA, schemaA := testenv.PostgresSchema(t)
		urlB := testenv.PostgresSchemaURL(t)
		nameA = schemaA

		connA, err := pgx.Connect(ctx, urlA)
		if err != nil {
			t.Fatal(err)
		}
		defer connA.Close(ctx)
		if _, err := connA.Exec(ctx, "CREATE TABLE widgets (id int PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		var gotSchema string
		if err := connA.QueryRow(ctx, "SELECT current_schema()").Scan(&gotSchema); err != nil {
			t.Fatal(err)
		}
		if gotSchema != schemaA {
			t.Errorf("current_schema() through pgx.Conn = %q, want %q", gotSchema, schemaA)
		}

		visible := func(t *testing.T, q func(string, ...any) interface{ Scan(...any) error }) bool {
			t.Helper()
			var reg *string
			if err := q("SELECT to_regclass('widgets')::text").Scan(&reg); err != nil {
				t.Fatal(err)
			}
			return reg != nil
		}

		poolA, err := pgxpool.New(ctx, urlA)
		if err != nil {
			t.Fatal(err)
		}
		defer poolA.Close()
		poolB, err := pgxpool.New(ctx, urlB)
		if err != nil {
			t.Fatal(err)
		}
		defer poolB.Close()
		if !visible(t, func(s string, a ...any) interface{ Scan(...any) error } { return poolA.QueryRow(ctx, s, a...) }) {
			t.Error("pgxpool: table not visible through its own schema URL")
		}
		if visible(t, func(s string, a ...any) interface{ Scan(...any) error } { return poolB.QueryRow(ctx, s, a...) }) {
			t.Error("pgxpool: table visible through another schema URL")
		}

		dbA, err := sql.Open("pgx", urlA)
		if err != nil {
			t.Fatal(err)
		}
		defer dbA.Close()
		dbB, err := sql.Open("pgx", urlB)
		if err != nil {
			t.Fatal(err)
		}
		defer dbB.Close()
		if !visible(t, func(s string, a ...any) interface{ Scan(...any) error } { return dbA.QueryRowContext(ctx, s, a...) }) {
			t.Error("database/sql: table not visible through its own schema URL")
		}
		if visible(t, func(s string, a ...any) interface{ Scan(...any) error } { return dbB.QueryRowContext(ctx, s, a...) }) {
			t.Error("database/sql: table visible through another schema URL")
		}
	})

	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", nameA).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("schema %s still exists after the test's cleanup", nameA)
	}
}
