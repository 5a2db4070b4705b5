package postgres_test

import (
	"database/sql"
	"testing"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// TestFleet runs the fleet cases (listeners table, pause and resume across
// two pools), each on a schema of its own.
func TestFleet(t *testing.T) {
	sqlqueuetest.RunFleet(t, sqlqueuetest.Harness{
		Dialect: postgres.Dialect{},
		Open: func(t *testing.T) sqlqueuetest.Env {
			url := testenv.PostgresSchemaURL(t)
			return sqlqueuetest.Env{Pool: func(t *testing.T, conns int, _ string) *sql.DB {
				db, err := postgres.Open(url, conns)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			}}
		},
	})
}
