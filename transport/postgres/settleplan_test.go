package postgres_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The settlement statements join through the primary key even when the
// table's statistics, gathered while almost every row was pending, make
// the rows they settle look like one: with a plain "state = 2" the generic
// plan read every leased row through the lease index instead.
func TestSettlementPlansUseThePrimaryKey(t *testing.T) {
	db := openDB(t, 2)
	src := newSource(t, db, "settleplan")
	q := src.Queue()
	execAll(t, db,
		`INSERT INTO `+q.Table+` (uuid, headers, body)
		 SELECT md5(g::text), '{}', convert_to(repeat('x', 100), 'UTF8') FROM generate_series(1, 20000) AS g`,
		`UPDATE `+q.Table+` SET state = 1, owner = 7, lease_until = now() + interval '1 minute' WHERE id <= 200`,
		`UPDATE `+q.Table+` SET state = 2 WHERE id <= 64`,
		`ANALYZE `+q.Table,
	)
	refs := make([]sqlqueue.Ref, 64)
	for i := range refs {
		refs[i] = sqlqueue.Ref{ID: int64(i + 1), Owner: 7}
	}
	d := postgres.Dialect{}
	for name, st := range map[string]sqlqueue.Stmt{
		"begin":    d.Begin(q, refs, 0),
		"complete": d.Complete(q, refs),
		"renew":    d.Renew(q, refs, 0),
		"release":  d.Release(q, refs),
	} {
		// The generic plan, which the driver's cached statements use after
		// a few executions.
		plan := genericPlan(t, db, st)
		if !strings.Contains(plan, "_pkey") || strings.Contains(plan, "_leased") {
			t.Errorf("%s: the plan does not join through the primary key:\n%s", name, plan)
		}
	}
}

// The handler's transaction settles its one row by the primary key, in the
// generic plan that a statement cached by the driver (pgx's default) runs
// once PostgreSQL judges it no worse than a custom one. The batched Complete
// it ran before joined an unnest of the ids, and on a table of a thousand
// rows that generic plan was a hash join over a sequential scan of the
// queue table: every handler transaction of a drain read the whole table
// (BenchmarkTxCost's transactional drain ran 24% slower).
func TestHandlerTxSettlementUsesThePrimaryKey(t *testing.T) {
	db := openDB(t, 2)
	src := newSource(t, db, "txsettleplan")
	q := src.Queue()
	execAll(t, db,
		`INSERT INTO `+q.Table+` (uuid, headers, body, state, owner, lease_until)
		 SELECT md5(g::text), '{}', '\x00'::bytea, 2, 7, now() + interval '1 minute' FROM generate_series(1, 1000) AS g`,
		`ANALYZE `+q.Table,
	)
	// The statement sqlqueue runs in the handler's transaction.
	st := postgres.Dialect{}.CompleteCommit(q, sqlqueue.Ref{ID: 1, Owner: 7})
	if plan := genericPlan(t, db, st); !strings.Contains(plan, "_pkey") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("the handler transaction's settlement does not go by the primary key:\n%s", plan)
	}
}

// genericPlan returns the generic plan of st (PREPARE, then EXPLAIN
// EXECUTE under plan_cache_mode = force_generic_plan), its arguments
// written as literals: integers and arrays of them.
func genericPlan(t *testing.T, db *sql.DB, st sqlqueue.Stmt) string {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lits := make([]string, len(st.Args))
	for i, a := range st.Args {
		switch v := a.(type) {
		case int64:
			lits[i] = strconv.FormatInt(v, 10)
		case int:
			lits[i] = strconv.Itoa(v)
		case []string:
			parts := make([]string, len(v))
			for j, k := range v {
				parts[j] = `"` + k + `"` // plain test keys: no quoting needed
			}
			lits[i] = "'{" + strings.Join(parts, ",") + "}'"
		case []int64:
			parts := make([]string, len(v))
			for j, n := range v {
				parts[j] = strconv.FormatInt(n, 10)
			}
			lits[i] = "'{" + strings.Join(parts, ",") + "}'"
		default:
			t.Fatalf("argument %d: %T has no literal here", i+1, a)
		}
	}
	execOn := func(q string) {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	execOn(`SET plan_cache_mode = force_generic_plan`)
	defer execOn(`RESET plan_cache_mode`)
	execOn(`PREPARE berth_generic AS ` + st.SQL)
	defer execOn(`DEALLOCATE berth_generic`)
	rows, err := conn.QueryContext(ctx, `EXPLAIN EXECUTE berth_generic(`+strings.Join(lits, ", ")+`)`)
	return planText(t, rows, err)
}
