package postgres_test

import (
	"database/sql"
	"strconv"
	"testing"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// TestBehaviours runs the SQL queue kit, every case on a schema of its own.
func TestBehaviours(t *testing.T) { sqlqueuetest.Run(t, kitHarness()) }

// kitHarness is the kit's harness on this engine, shared by TestBehaviours
// and TestFleet.
func kitHarness() sqlqueuetest.Harness {
	return sqlqueuetest.Harness{
		Dialect: postgres.Dialect{},
		Open: func(t *testing.T) sqlqueuetest.Env {
			url := testenv.PostgresSchemaURL(t)
			return sqlqueuetest.Env{Pool: func(t *testing.T, conns int, app string) *sql.DB {
				u := url
				if app != "" {
					u = withParams(t, url, "application_name", app)
				}
				db, err := postgres.Open(u, conns)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			}}
		},
		Placeholder: func(n int) string { return "$" + strconv.Itoa(n) },
		InsertRaw: func(q sqlqueue.Queue, r sqlqueuetest.RawRow) sqlqueue.Stmt {
			return sqlqueue.Stmt{
				SQL: `INSERT INTO ` + q.Table + ` (uuid, headers, body, state, owner, lease_until)
VALUES ($1, $2, $3, $4, NULLIF($5::bigint, 0),
	CASE WHEN $6::bigint <> 0 THEN now() + $6::bigint * interval '1 millisecond' END)`,
				Args: []any{r.UUID, r.Headers, r.Body, r.State, r.Owner, r.Lease.Milliseconds()},
			}
		},
		URL:  func(t *testing.T) string { return testenv.PostgresURL(t) },
		Kill: terminateBackends,
		// PostgreSQL's column types refuse NULL headers and invalid UTF-8
		// text at insert, so those cannot reach the subscriber. These two
		// hold what the casts 'null'::json::text and 7::text store.
		BadRows: []sqlqueuetest.BadRow{
			{RawRow: sqlqueuetest.RawRow{UUID: "null-headers-sql", Headers: "null", Body: []byte{0}}, Payload: []byte{0}},
			{RawRow: sqlqueuetest.RawRow{UUID: "int-as-headers", Headers: "7", Body: []byte("seven")}, Dead: true},
		},
		// state is a smallint.
		StrayStates: []any{-1},
	}
}

// terminateBackends ends every backend whose application_name is app.
func terminateBackends(t *testing.T, db *sql.DB, app string) {
	t.Helper()
	var n int
	err := db.QueryRow(`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n)
	if err != nil {
		t.Fatalf("terminate the backends of %s: %v", app, err)
	}
	if n == 0 {
		t.Fatalf("no backend has application_name %s", app)
	}
}
