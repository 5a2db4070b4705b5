package sqlite_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// TestSettlementTextsBySizeClass checks that the settlements' texts depend
// on their batch's size class (a power of two), not its size: the 256
// sizes of a batch make at most 9 texts of each statement, all of which
// the statement cache keeps prepared. The NULL rows that pad a batch to
// its class settle nothing: a batch of 3 settles its 3 rows.
func TestSettlementTextsBySizeClass(t *testing.T) {
	d := sqlite.Dialect{}
	q := sqlqueue.QueueFor(d, sqlqueue.Tables{}, "orders", "")
	kinds := map[string]func(rs []sqlqueue.Ref) sqlqueue.Stmt{
		"Begin":         func(rs []sqlqueue.Ref) sqlqueue.Stmt { return d.Begin(q, rs, time.Minute) },
		"Complete":      func(rs []sqlqueue.Ref) sqlqueue.Stmt { return d.Complete(q, rs) },
		"Renew":         func(rs []sqlqueue.Ref) sqlqueue.Stmt { return d.Renew(q, rs, time.Minute) },
		"Release":       func(rs []sqlqueue.Ref) sqlqueue.Stmt { return d.Release(q, rs) },
		"ReleaseDirect": func(rs []sqlqueue.Ref) sqlqueue.Stmt { return d.ReleaseDirect(q, rs) },
		"Retry": func(rs []sqlqueue.Ref) sqlqueue.Stmt {
			rows := make([]sqlqueue.RetryRef, len(rs))
			for i, r := range rs {
				rows[i] = sqlqueue.RetryRef{Ref: r, Line: "attempt 1: no"}
			}
			return d.Retry(q, rows)
		},
	}
	for name, st := range kinds {
		texts := map[string]bool{}
		for n := 1; n <= sqlqueue.DefaultSettleBatch; n++ {
			texts[st(make([]sqlqueue.Ref, n)).SQL] = true
		}
		if len(texts) > 9 {
			t.Errorf("%s: %d texts for batches of 1 to %d rows, want at most 9", name, len(texts), sqlqueue.DefaultSettleBatch)
		}
	}

	conn, q := queueConn(t)
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, `INSERT INTO `+q.Table+` (uuid, headers, body, created_at, due_at, state, owner, lease_until)
		VALUES ('a', '{}', x'00', 0, 0, 2, 7, 0), ('b', '{}', x'00', 0, 0, 2, 7, 0), ('c', '{}', x'00', 0, 0, 2, 7, 0),
		       ('d', '{}', x'00', 0, 0, 2, 7, 0), ('e', '{}', x'00', 0, 0, 2, 7, 0)`); err != nil {
		t.Fatal(err)
	}
	three := []sqlqueue.Ref{{ID: 1, Owner: 7}, {ID: 2, Owner: 7}, {ID: 3, Owner: 7}}
	retry := kinds["Retry"](three[:1])
	if got := scanIDs(t, conn, retry.SQL, retry.Args...); !slices.Equal(got, []int64{1}) {
		t.Fatalf("Retry of row 1 (padded to 1) returned %v", got)
	}
	complete := d.Complete(q, append(three[1:], sqlqueue.Ref{ID: 4, Owner: 7}))
	if got := scanIDs(t, conn, complete.SQL, complete.Args...); !slices.Equal(got, []int64{2, 3, 4}) {
		t.Fatalf("Complete of rows 2, 3, 4 (padded to 4) returned %v", got)
	}
	if got := scanIDs(t, conn, `SELECT id FROM `+q.Table); !slices.Equal(got, []int64{1, 5}) {
		t.Fatalf("rows left %v, want [1 5]", got)
	}
}
