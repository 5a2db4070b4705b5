package sqlserver_test

import (
	"database/sql"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
	"github.com/berth-go/berth/transport/sqlserver"
)

// TestBehaviours runs the SQL queue kit against the SQL Server at
// BERTH_TEST_SQLSERVER_URL, every case in a schema of its own that is
// dropped afterwards. Without the variable the cases that need a server
// skip, even under CI=true; BadURLParameterNamesItself needs none. The
// killed-instance case needs a login that may see and end other sessions
// (VIEW SERVER STATE and ALTER ANY CONNECTION, e.g. sa).
func TestBehaviours(t *testing.T) {
	sqlqueuetest.Run(t, sqlqueuetest.Harness{
		Dialect:     sqlserver.Dialect{},
		Open:        openSchema,
		Placeholder: func(n int) string { return "@p" + strconv.Itoa(n) },
		// Owner and lease are always bound as bigints (a nil would reach the
		// server as an nvarchar); the lease is added in seconds and
		// milliseconds, as the dialect's own statements do, since DATEADD
		// takes an int.
		InsertRaw: func(q sqlqueue.Queue, r sqlqueuetest.RawRow) sqlqueue.Stmt {
			return sqlqueue.Stmt{
				SQL: `INSERT INTO ` + q.Table + ` (uuid, headers, body, state, owner, lease_until)
VALUES (@p1, @p2, @p3, @p4, NULLIF(@p5, 0),
	CASE WHEN @p6 <> 0 THEN DATEADD(millisecond, CAST(@p6 % 1000 AS int), DATEADD(second, CAST(@p6 / 1000 AS int), SYSUTCDATETIME())) END)`,
				Args: []any{r.UUID, r.Headers, r.Body, r.State, r.Owner, r.Lease.Milliseconds()},
			}
		},
		// Only parsed: the bad parameters fail before anything connects.
		URL:  func(*testing.T) string { return "sqlserver://sa:x@127.0.0.1:1?database=test" },
		Kill: killSessions,
		// state is a tinyint (0 to 255): no negative state can be written.
		StrayStates: []any{255},
	})
}

// openSchema names a fresh schema on the test server (the engine creates
// it) and drops it, with everything in it, at cleanup.
func openSchema(t *testing.T) sqlqueuetest.Env {
	base := testenv.SQLServerURL(t)
	schema := testenv.UniqueName("berth")
	admin := openAdmin(t, base)
	t.Cleanup(func() { dropSchema(t, admin, schema) })
	cfg, err := sqlserver.ParsePublisherURL(mustParse(t, base))
	if err != nil {
		t.Fatal(err)
	}
	return sqlqueuetest.Env{
		Tables: sqlqueue.Tables{Schema: schema},
		Pool: func(t *testing.T, conns int, app string) *sql.DB {
			dsn := cfg.DSN
			if app != "" {
				dsn = withAppName(t, dsn, app)
			}
			db, err := sqlserver.Open(dsn, conns)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return db
		},
	}
}

// withAppName sets go-mssqldb's "app name" (the sessions' program_name)
// in a URL-form DSN, replacing one given in any case.
func withAppName(t *testing.T, dsn, app string) string {
	u := mustParse(t, dsn)
	q := u.Query()
	for k := range q {
		if strings.EqualFold(k, "app name") {
			q.Del(k)
		}
	}
	q.Set("app name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// killSessions ends, with KILL, every session whose program_name is app.
// KILL takes a literal session id, so each is its own batch.
func killSessions(t *testing.T, db *sql.DB, app string) {
	t.Helper()
	rows, err := db.Query(`SELECT session_id FROM sys.dm_exec_sessions WHERE program_name = @p1 AND session_id <> @@SPID`, app)
	if err != nil {
		t.Fatalf("list the sessions of %s: %v", app, err)
	}
	var ids []int
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("list the sessions of %s: %v", app, err)
	}
	_ = rows.Close()
	if len(ids) == 0 {
		t.Fatalf("no session has program_name %s (seeing other logins' sessions needs VIEW SERVER STATE)", app)
	}
	for _, id := range ids {
		if _, err := db.Exec("KILL " + strconv.Itoa(id)); err != nil {
			t.Fatalf("KILL %d (needs ALTER ANY CONNECTION): %v", id, err)
		}
	}
}
