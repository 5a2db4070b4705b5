package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/berth-go/berth/transport/sqlite"
)

// sqliteErrors provokes real errors: SQLITE_BUSY (a second connection
// wants the write lock another holds, with no busy timeout), SQLITE_LOCKED
// (a table dropped while a statement of the same connection reads it), and
// two lasting ones.
func sqliteErrors(t *testing.T) (busy, locked, syntax, constraint error) {
	t.Helper()
	ctx := context.Background()
	dsn := "file:" + filepath.Join(t.TempDir(), "t.db") + "?_pragma=busy_timeout(0)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY); INSERT INTO t VALUES (1), (2)`); err != nil {
		t.Fatal(err)
	}
	a, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	_, busy = b.ExecContext(ctx, `BEGIN IMMEDIATE`)
	if _, err := a.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}

	rows, err := a.QueryContext(ctx, `SELECT id FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	rows.Next()
	_, locked = a.ExecContext(ctx, `DROP TABLE t`)
	_ = rows.Close()

	_, syntax = a.ExecContext(ctx, `SELEC 1`)
	_, constraint = a.ExecContext(ctx, `INSERT INTO t VALUES (1)`)
	return busy, locked, syntax, constraint
}

func TestTransientClassification(t *testing.T) {
	busy, locked, syntax, constraint := sqliteErrors(t)
	cases := []struct {
		name      string
		err       error
		transient bool
	}{
		{"busy", fmt.Errorf("claim: %w", busy), true},
		{"locked", locked, true},
		{"syntax error", syntax, false},
		{"constraint", constraint, false},
		{"cancelled", context.Canceled, false},
		{"other", errors.New("database is locked"), false},
		{"nil", nil, false},
	}
	d := sqlite.Dialect{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.transient && c.err == nil {
				t.Fatal("the database did not fail")
			}
			if got := d.IsTransient(c.err); got != c.transient {
				t.Errorf("IsTransient(%v) = %v, want %v", c.err, got, c.transient)
			}
			if got := d.NotCommitted(c.err); got != c.transient {
				t.Errorf("NotCommitted(%v) = %v, want %v", c.err, got, c.transient)
			}
		})
	}
}
