package postgres_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// A queue table that has never been analyzed with rows in it gets its
// statistics from the first claim that comes back full: without them the
// planner takes a fraction of a percent of the rows for pending and may
// sort the whole backlog for each claim (a burst into a new table drained
// at a third of its speed until autovacuum's first visit). A second source
// finds them and analyzes nothing.
func TestFirstFullClaimGathersStatistics(t *testing.T) {
	db := openDB(t, 4)
	src := newSource(t, db, "firststats")
	q := src.Queue()
	ctx := context.Background()
	execAll(t, db,
		// Autovacuum would gather them too, at a time of its own.
		`ALTER TABLE `+q.Table+` SET (autovacuum_enabled = false)`,
		`INSERT INTO `+q.Table+` (uuid, headers, body)
		 SELECT md5(g::text), '{}', convert_to(repeat('x', 60), 'UTF8') FROM generate_series(1, 20000) AS g`,
	)
	statsCurrent := func() bool { return hasStats(t, db, q) }
	if statsCurrent() {
		t.Fatal("the new table has statistics before any claim")
	}
	t.Logf("claim plan before:\n%s", claimPlan(t, db, q))

	ds, err := src.Claim(ctx, 5) // full: 20,000 rows are due
	if err != nil || len(ds) != 5 {
		t.Fatalf("claim: %d rows, %v", len(ds), err)
	}
	waitFor(t, 10*time.Second, statsCurrent)
	waitFor(t, 10*time.Second, func() bool { return src.Stats().Analyzes == 1 })
	if plan := claimPlan(t, db, q); strings.Contains(plan, "Sort") || !strings.Contains(plan, "_ready") {
		t.Errorf("with statistics the claim still sorts instead of walking the ready index:\n%s", plan)
	}

	other := newSource(t, db, "firststats")
	if ds, err := other.Claim(ctx, 5); err != nil || len(ds) != 5 {
		t.Fatalf("second source's claim: %d rows, %v", len(ds), err)
	}
	// Its check runs in the background; Close waits for it.
	if err := other.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := other.Stats(); st.Analyzes != 0 || st.Other == 0 {
		t.Errorf("second source: analyzes %d, other statements %d; want 0 and its check", st.Analyzes, st.Other)
	}
}

// A queue that was quiet has statistics of a table of a page or two (as
// autovacuum leaves it), and the connections' generic plans made then read
// the whole table. When a burst fills it, the first claims that come back
// full find the statistics stale for the table's size and analyze it,
// which makes every connection plan again: a burst of 100,000 rows into
// such a queue drained at 10,585 msg/s with about 1,150 sequential scans
// of the table, and at 15,128–19,607 with about 60 (docs/benchmarks.md).
// A claim of the same size soon after checks nothing.
func TestBurstAfterQuietGathersStatistics(t *testing.T) {
	db := openDB(t, 4)
	src := newSource(t, db, "burststats")
	q := src.Queue()
	ctx := context.Background()
	insert := func(n int) string {
		return `INSERT INTO ` + q.Table + ` (uuid, headers, body)
		 SELECT md5(g::text), '{}', convert_to(repeat('x', 60), 'UTF8') FROM generate_series(1, ` + strconv.Itoa(n) + `) AS g`
	}
	execAll(t, db,
		`ALTER TABLE `+q.Table+` SET (autovacuum_enabled = false)`,
		insert(2),
		`VACUUM ANALYZE `+q.Table, // a quiet queue, as autovacuum leaves it
	)
	if !hasStats(t, db, q) {
		t.Fatal("the quiet queue's statistics read as stale")
	}
	before := src.Stats().Other
	if ds, err := src.Claim(ctx, 1); err != nil || len(ds) != 1 { // full: checks, analyzes nothing
		t.Fatalf("quiet claim: %d rows, %v", len(ds), err)
	}
	waitFor(t, 10*time.Second, func() bool { return src.Stats().Other > before }) // the check's read
	// The burst: about 100 pages.
	execAll(t, db, insert(5000))
	if src.Stats().Analyzes != 0 {
		t.Fatal("the quiet queue was analyzed")
	}
	if hasStats(t, db, q) {
		t.Fatal("statistics of a two-row table read as current for 5,000 rows")
	}
	// Full, of more rows than the last check's claim, and as large as a
	// burst's claims soon are (a claim of a row or two does not check
	// again within the minute).
	if ds, err := src.Claim(ctx, 16); err != nil || len(ds) != 16 {
		t.Fatalf("burst claim: %d rows, %v", len(ds), err)
	}
	waitFor(t, 10*time.Second, func() bool { return src.Stats().Analyzes == 1 })
	if !hasStats(t, db, q) {
		t.Error("after the ANALYZE the statistics still read as stale")
	}
	if ds, err := src.Claim(ctx, 16); err != nil || len(ds) != 16 {
		t.Fatalf("second burst claim: %d rows, %v", len(ds), err)
	}
	other := src.Stats().Other
	if err := src.Close(ctx); err != nil { // waits for a check under way
		t.Fatal(err)
	}
	if st := src.Stats(); st.Analyzes != 1 || st.Other != other {
		t.Errorf("after a claim of the same size: analyzes %d, other statements %d → %d; want 1 and no check", st.Analyzes, other, st.Other)
	}
}

// hasStats answers the dialect's HasStats for q.
func hasStats(t *testing.T, db *sql.DB, q sqlqueue.Queue) bool {
	t.Helper()
	var has bool
	st := postgres.Dialect{}.HasStats(q)
	if err := db.QueryRowContext(context.Background(), st.SQL, st.Args...).Scan(&has); err != nil {
		t.Fatal(err)
	}
	return has
}

// claimPlan is EXPLAIN of the claim's choice of rows for 64 rows.
func claimPlan(t *testing.T, db *sql.DB, q sqlqueue.Queue) string {
	t.Helper()
	return explain(t, db, postgres.Dialect{}.Claim(q, 1, 64, time.Minute))
}

// explain returns EXPLAIN of st, run in a transaction on c that is rolled
// back (EXPLAIN of a data-modifying statement runs nothing, but the
// transaction keeps it so for certain).
func explain(t *testing.T, c interface {
	BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
}, st sqlqueue.Stmt) string {
	t.Helper()
	tx, err := c.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.Query(`EXPLAIN `+st.SQL, st.Args...)
	return planText(t, rows, err)
}

// planText returns the lines of an EXPLAIN's rows, failing the test on
// err or a read error.
func planText(t *testing.T, rows *sql.Rows, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// execAll runs each statement on db, failing the test at the first error.
func execAll(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.ExecContext(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}
