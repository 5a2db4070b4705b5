package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// TestBehaviours runs the SQL queue kit on a database file per case.
// SQLite runs one writer at a time and has no server sessions: the cases
// that hold a write transaction open skip, and the killed instance is
// abandoned instead (see package sqlqueuetest, Opting out).
func TestBehaviours(t *testing.T) { sqlqueuetest.Run(t, kitHarness()) }

// kitHarness is the kit's harness on this engine, shared by TestBehaviours
// and TestFleet.
func kitHarness() sqlqueuetest.Harness {
	return sqlqueuetest.Harness{
		Dialect: sqlite.Dialect{},
		Open: func(t *testing.T) sqlqueuetest.Env {
			path := filepath.Join(t.TempDir(), "kit.db")
			return sqlqueuetest.Env{Pool: func(t *testing.T, _ int, _ string) *sql.DB {
				db, closer, err := sqlite.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = closer.Close() })
				return db
			}}
		},
		Placeholder: func(int) string { return "?" },
		InsertRaw: func(q sqlqueue.Queue, r sqlqueuetest.RawRow) sqlqueue.Stmt {
			// The dialect's clock is the process's (Dialect.Now is nil):
			// leases are Unix milliseconds from time.Now.
			var until any
			if r.Lease != 0 {
				until = time.Now().Add(r.Lease).UnixMilli()
			}
			return sqlqueue.Stmt{
				SQL:  `INSERT INTO ` + q.Table + ` (uuid, headers, body, state, owner, created_at, due_at, lease_until) VALUES (?, ?, ?, ?, NULLIF(?, 0), 0, 0, ?)`,
				Args: []any{r.UUID, r.Headers, r.Body, r.State, r.Owner, until},
			}
		},
		URL:          func(*testing.T) string { return "sqlite://" + sqlite.Memory },
		SingleWriter: true,
		// SQLite's columns hold any type: BLOB and INTEGER headers, TEXT
		// bodies.
		BadRows: []sqlqueuetest.BadRow{
			{RawRow: sqlqueuetest.RawRow{UUID: "blob-headers", Headers: []byte{0xff, 0xfe, '{'}, Body: []byte("x")}, Dead: true},
			{RawRow: sqlqueuetest.RawRow{UUID: "int-headers", Headers: 42, Body: []byte("x")}, Dead: true},
			{RawRow: sqlqueuetest.RawRow{UUID: "text-body", Headers: "{}", Body: "abc"}, Payload: []byte("abc")},
		},
		// The INTEGER state column holds negatives, and text too.
		StrayStates: []any{-1, "done"},
		// Text sorts above every integer: "lease_until < now" never holds.
		StrayLeases: []any{"tomorrow"},
	}
}
