package postgres_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The statements that run once or more per message are prepared once per
// connection (pgx's statement cache), and PostgreSQL plans a prepared
// statement anew at every execution for as long as the plans it makes for
// the given values are estimated cheaper than its generic plan. With one
// row's arrays or a small LIMIT they always were, on a new queue table
// (no statistics, a few rows, as a queue mostly is at light load) or a
// full one: a publish of one message spent 0.21 ms planning against
// 0.06 ms executing, and a hot key's hand-off claim 0.46 ms against
// 0.22 ms (docs/benchmarks.md). Their arrays and limits are read through a
// scalar sub-select, which the planner estimates without the value, so
// after its five trial plans PostgreSQL keeps the generic one. Each
// statement runs here eight times with one row's arguments on one
// connection, on both kinds of table; pg_prepared_statements then counts
// the generic plans it ran. Before, every statement kept planning anew on
// one kind of table or both.
func TestPerMessageStatementsKeepTheirGenericPlan(t *testing.T) {
	db := openDB(t, 2)
	fresh := newSource(t, db, "plancache").Queue()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, full, filled, _ := planQueue(t, "plancache_full") // 5,000 rows, analyzed
	for _, c := range []struct {
		name string
		conn *sql.Conn
		q    sqlqueue.Queue
	}{{"new table", conn, fresh}, {"full table", full, filled}} {
		t.Run(c.name, func(t *testing.T) { keepGenericPlans(t, ctx, c.conn, c.q) })
	}
}

// keepGenericPlans runs each per-message statement on q eight times and
// fails for each one that ran no generic plan.
func keepGenericPlans(t *testing.T, ctx context.Context, conn *sql.Conn, q sqlqueue.Queue) {
	d := postgres.Dialect{}
	refs := []sqlqueue.Ref{{ID: 1, Owner: 7}}
	for _, c := range []struct {
		name string
		st   func(i int) sqlqueue.Stmt
	}{
		{"insert", func(i int) sqlqueue.Stmt {
			row := sqlqueue.InsertRow{UUID: "u", Headers: []byte("{}"), Body: []byte("x")}
			if i%2 == 1 {
				row.OrderingKey = "k"
			}
			return d.InsertNotify(q, []sqlqueue.InsertRow{row}, i == 0)[0]
		}},
		{"claim", func(i int) sqlqueue.Stmt { return d.Claim(q, 1, 1+i%2, time.Minute) }},
		{"claim direct", func(i int) sqlqueue.Stmt { return d.ClaimDirect(q, 1, 2, 1, time.Minute, time.Minute) }},
		{"claim complete", func(i int) sqlqueue.Stmt { return d.ClaimComplete(q, 1, 2, 1, time.Minute, time.Minute, refs) }},
		{"claim keys", func(i int) sqlqueue.Stmt {
			return d.ClaimKeys(q, 1, []string{"k"}, []int64{1}, 1, 1, time.Minute, time.Minute, refs)
		}},
		{"begin", func(i int) sqlqueue.Stmt { return d.Begin(q, refs, time.Minute) }},
		{"complete", func(i int) sqlqueue.Stmt { return d.Complete(q, refs) }},
		{"renew", func(i int) sqlqueue.Stmt { return d.Renew(q, refs, time.Minute) }},
		{"release", func(i int) sqlqueue.Stmt { return d.Release(q, refs) }},
		{"release direct", func(i int) sqlqueue.Stmt { return d.ReleaseDirect(q, refs) }},
		{"retry", func(i int) sqlqueue.Stmt {
			return d.Retry(q, []sqlqueue.RetryRef{{Ref: refs[0], Delay: time.Second, Line: "x"}})
		}},
	} {
		var text string
		for i := range 8 {
			st := c.st(i)
			text = st.SQL
			rows, err := conn.QueryContext(ctx, st.SQL, st.Args...)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			for rows.Next() {
			}
			if err := rows.Close(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		var generic, custom int64
		if err := conn.QueryRowContext(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, text).
			Scan(&generic, &custom); err != nil {
			t.Fatalf("%s: the statement is not prepared on the connection: %v", c.name, err)
		}
		if generic == 0 {
			t.Errorf("%s: planned anew at every execution (%d custom plans, no generic one)", c.name, custom)
		}
	}
}
