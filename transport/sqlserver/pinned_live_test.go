package sqlserver_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlserver"
)

// TestPinnedPlansOnAnEmptyTable compiles the sweeps and the settlements
// while their queue table is empty — where, unpinned, a clustered scan
// costs the same as a seek and may be the plan cached for every later
// run — then fills the table with 5,000 rows and runs them again: each
// time each must seek (its filtered index for a sweep, the primary key per
// ref for a settlement) and scan nothing of the queue table. It runs when
// BERTH_TEST_SQLSERVER_URL is set (issue 37 item 5).
func TestPinnedPlansOnAnEmptyTable(t *testing.T) {
	ctx, db, n, q := keyedQueue(t, "pinned", 1, "")
	if _, err := db.ExecContext(ctx, "DELETE FROM "+q.Table); err != nil {
		t.Fatal(err)
	}
	d := sqlserver.Dialect{}
	refs := []sqlqueue.Ref{{ID: 1, Owner: 1}, {ID: 2, Owner: 1}}
	cases := []struct {
		name, index string // index "" is the clustered primary key
		st          sqlqueue.Stmt
	}{
		{"recover", q.Name + "_leased", d.Recover(q, 5, 500)},
		{"dead-letter expired", q.Name + "_leased", d.DeadLetterExpired(n, q, 5, "r", 500)[0]},
		{"drop expired", q.Name + "_expiry", d.DropExpired(q, 500)},
		{"begin", "", d.Begin(q, refs, time.Minute)},
		{"complete", "", d.Complete(q, refs)},
		{"renew", "", d.Renew(q, refs, time.Minute)},
		{"retry", "", d.Retry(q, []sqlqueue.RetryRef{{Ref: refs[0]}, {Ref: refs[1]}})},
		{"release", "", d.Release(q, refs)},
	}
	check := func(when string) {
		for _, c := range cases {
			acc := accesses(t, actualPlans(t, ctx, db, c.st))
			seeks := false
			for _, a := range acc {
				if a.Table != q.Name {
					continue
				}
				if strings.HasSuffix(a.Op, "Scan") {
					t.Errorf("%s, %s: %s of %s.%s", c.name, when, a.Op, a.Table, a.Index)
				}
				if strings.HasSuffix(a.Op, "Seek") && (a.Index == c.index || c.index == "" && strings.HasPrefix(a.Index, "PK__")) {
					seeks = true
				}
			}
			if !seeks {
				t.Errorf("%s, %s: no seek on %q; accesses: %+v", c.name, when, c.index, acc)
			}
		}
	}
	check("compiled on the empty table")
	fill := `INSERT INTO ` + q.Table + ` (uuid, headers, body, state, owner, attempts, lease_until, expires_at)
SELECT TOP (5000) CONCAT(N'u', x.n), N'{}', 0x78,
	CASE WHEN x.n % 2 = 0 THEN 2 ELSE 0 END, CASE WHEN x.n % 2 = 0 THEN 1 END, 1,
	CASE WHEN x.n % 2 = 0 THEN DATEADD(minute, 1, SYSUTCDATETIME()) END,
	CASE WHEN x.n % 2 = 1 THEN DATEADD(minute, 1, SYSUTCDATETIME()) END
FROM (SELECT ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS n FROM sys.all_objects AS a CROSS JOIN sys.all_objects AS b) AS x;`
	if _, err := db.ExecContext(ctx, fill); err != nil {
		t.Fatal(err)
	}
	check("on 5,000 rows")
}

// TestOwnStatementsIgnoreALeakedIsolationLevel leaves a pooled connection
// at SERIALIZABLE, as a caller's code may (on-premises SQL Server does not
// reset it when the connection returns to the pool), and runs Berth's own
// Complete and Begin there, inside a transaction so that their locks
// stay: neither holds a key-range lock, which SERIALIZABLE takes for the
// missing key each seeks, and the session is still at SERIALIZABLE after
// them (the batch's own READ COMMITTED is scoped to it). CompleteInTx, for
// a caller's transaction, runs at the caller's level: it does take the
// range lock, which shows the check can see one. It runs when
// BERTH_TEST_SQLSERVER_URL is set (issue 37 item 6).
func TestOwnStatementsIgnoreALeakedIsolationLevel(t *testing.T) {
	ctx, db, _, q := keyedQueue(t, "isolation", 10, "")
	d := sqlserver.Dialect{}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// No arguments: a batch, whose SET stays on the session.
	if _, err := conn.ExecContext(ctx, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"); err != nil {
		t.Fatal(err)
	}
	missing := []sqlqueue.Ref{{ID: 1 << 40, Owner: 1}}
	rangeLocks := func(st sqlqueue.Stmt) (n, level int) {
		t.Helper()
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		rows, err := tx.QueryContext(ctx, st.SQL, st.Args...)
		if err != nil {
			t.Fatal(err)
		}
		for {
			for rows.Next() {
			}
			if !rows.NextResultSet() {
				break
			}
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		err = tx.QueryRowContext(ctx, `SELECT
	(SELECT COUNT(*) FROM sys.dm_tran_locks WHERE request_session_id = @@SPID AND request_mode LIKE 'Range%'),
	(SELECT transaction_isolation_level FROM sys.dm_exec_sessions WHERE session_id = @@SPID)`).Scan(&n, &level)
		if err != nil && err != sql.ErrNoRows {
			t.Fatal(err)
		}
		return n, level
	}
	for name, st := range map[string]sqlqueue.Stmt{
		"Complete": d.Complete(q, missing),
		"Begin":    d.Begin(q, missing, time.Minute),
	} {
		n, level := rangeLocks(st)
		if n != 0 {
			t.Errorf("%s on a connection left at SERIALIZABLE holds %d key-range locks", name, n)
		}
		if level != 4 {
			t.Errorf("after %s the session is at level %d, want 4 (SERIALIZABLE, the caller's)", name, level)
		}
	}
	if n, _ := rangeLocks(d.CompleteInTx(q, missing)); n == 0 {
		t.Error("CompleteInTx at SERIALIZABLE holds no key-range lock: the check cannot tell the levels apart")
	}
}
