package sqlqueuetest_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// A dialect's test hands the kit its hooks, here SQLite's; in a _test.go
// file it is called as sqlqueuetest.Run(t, h). Validate names every
// required hook a harness lacks.
func Example() {
	h := sqlqueuetest.Harness{
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
			return sqlqueue.Stmt{
				SQL:  `INSERT INTO ` + q.Table + ` (uuid, headers, body, state, created_at, due_at) VALUES (?, ?, ?, ?, 0, 0)`,
				Args: []any{r.UUID, r.Headers, r.Body, r.State},
			}
		},
		SingleWriter: true,
	}
	fmt.Println(h.Validate())
	fmt.Println(sqlqueuetest.Harness{Dialect: sqlite.Dialect{}}.Validate())
	// Output:
	// <nil>
	// sqlqueuetest: Harness: Open: required
	// Placeholder: required
	// InsertRaw: required
}
