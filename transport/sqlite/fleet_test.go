package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// TestFleet runs the fleet cases on a database file per case. SQLite has
// one pool per database file in a process, so the two "processes" of the
// pause case share it.
func TestFleet(t *testing.T) {
	sqlqueuetest.RunFleet(t, sqlqueuetest.Harness{
		Dialect: sqlite.Dialect{},
		Open: func(t *testing.T) sqlqueuetest.Env {
			path := filepath.Join(t.TempDir(), "fleet.db")
			return sqlqueuetest.Env{Pool: func(t *testing.T, _ int, _ string) *sql.DB {
				db, closer, err := sqlite.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = closer.Close() })
				return db
			}}
		},
	})
}
