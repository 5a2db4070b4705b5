package postgres_test

import (
	"context"
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
	ctx := context.Background()
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
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.ExecContext(ctx, `RESET plan_cache_mode`) }()
	for name, st := range map[string]sqlqueue.Stmt{
		"begin":    d.Begin(q, refs, 0),
		"complete": d.Complete(q, refs),
		"renew":    d.Renew(q, refs, 0),
		"release":  d.Release(q, refs),
	} {
		// EXPLAIN of the prepared statement: the generic plan, which the
		// driver's cached statements use after a few executions.
		plan := explain(t, conn, st)
		if !strings.Contains(plan, "_pkey") || strings.Contains(plan, "_leased") {
			t.Errorf("%s: the plan does not join through the primary key:\n%s", name, plan)
		}
	}
}
