package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// BenchmarkKeyedRowCost drains a queue table of 20,000 rows, 27 rows a
// claim (the rows a claim takes in the sql/ordered drain), each claim's
// rows deleted by one Complete, with the statements prepared once as the
// subscriber's statement cache does, and reports the database's time per
// row for the claims and for the deletes. It takes the pipeline, the
// handlers and the Go side away, to show what a keyed row costs SQLite
// itself (issue 39: 1,000 keys drain at 65–75% of unordered there):
//
//   - unordered: no key, ClaimDirect (the full claim);
//   - keyed/full: 1,000 keys interleaved (row i has key i mod 1,000),
//     claimed by ClaimDirect in id order, none waiting: the key index
//     maintained by the deletes, rows taken as unordered ones are;
//   - keyed/handoff-in-order: the same rows, all but each key's first
//     waiting (as Insert marks them), claimed by ClaimKeys over 27 keys at
//     a time in key order, so the heads claimed together sit side by side;
//   - keyed/handoff-scattered: ClaimKeys over 27 keys drawn at random
//     among those with rows left, as in a drain where the keys in flight
//     have run ahead of each other: the rows claimed together, and so
//     deleted together, lie on different pages.
//
// Run:
//
//	go test ./transport/sqlite -run '^$' -bench KeyedRowCost -benchtime 1x -count 3
func BenchmarkKeyedRowCost(b *testing.B) {
	const rows, keys, batch = 20000, 1000, 27
	modes := []struct {
		name                    string
		keyed, handoff, scatter bool // handoff: the rows behind each key's first are waiting
	}{
		{name: "unordered"},
		{name: "keyed/full", keyed: true},
		{name: "keyed/handoff-in-order", keyed: true, handoff: true},
		{name: "keyed/handoff-scattered", keyed: true, handoff: true, scatter: true},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			var claimT, deleteT time.Duration
			done := 0
			for range b.N {
				conn, q := queueConn(b)
				key, wait := "NULL", "0"
				if m.keyed {
					key = fmt.Sprintf("'key-' || (i %% %d)", keys)
				}
				if m.handoff {
					wait = fmt.Sprintf("i >= %d", keys)
				}
				fill := fmt.Sprintf(`WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < %d)
INSERT INTO %s (uuid, headers, body, created_at, due_at, ordering_key, waiting)
SELECT 'u' || i, CASE WHEN %s IS NULL THEN '{}' ELSE json_object('berth_ordering_key', %s) END, CAST(i AS TEXT), 0, 0, %s, %s FROM g`,
					rows-1, q.Table, key, key, key, wait)
				if _, err := conn.ExecContext(context.Background(), fill); err != nil {
					b.Fatal(err)
				}
				c, d, n := drainByBatch(b, conn, q, keys, rows/keys, batch, m.handoff, m.scatter)
				claimT, deleteT, done = claimT+c, deleteT+d, done+n
			}
			if done != rows*b.N {
				b.Fatalf("drained %d rows of %d", done, rows*b.N)
			}
			b.ReportMetric(float64(claimT.Nanoseconds())/1e3/float64(done), "claim-µs/row")
			b.ReportMetric(float64(deleteT.Nanoseconds())/1e3/float64(done), "delete-µs/row")
		})
	}
}

// drainByBatch claims batch rows at a time and deletes each claim's rows,
// until the table is empty, and returns the time spent in the claims, in
// the deletes, and the rows drained. With handoff, each claim is ClaimKeys
// over batch keys that still have rows (perKey rows each at first): the
// next ones in key order, or, with scatter, drawn at random.
func drainByBatch(b *testing.B, conn *sql.Conn, q sqlqueue.Queue, keys, perKey, batch int, handoff, scatter bool) (claimT, deleteT time.Duration, done int) {
	ctx := context.Background()
	d := sqlite.Dialect{}
	prepared := map[string]*sql.Stmt{}
	run := func(st sqlqueue.Stmt, scan func(*sql.Rows)) {
		ps := prepared[st.SQL]
		if ps == nil {
			var err error
			if ps, err = conn.PrepareContext(ctx, st.SQL); err != nil {
				b.Fatal(err)
			}
			prepared[st.SQL] = ps
		}
		rs, err := ps.QueryContext(ctx, st.Args...)
		if err != nil {
			b.Fatal(err)
		}
		for rs.Next() {
			scan(rs)
		}
		if err := rs.Close(); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, ps := range prepared {
			_ = ps.Close()
		}
	}()
	left := make([]int, keys)
	for i := range left {
		left[i] = perKey
	}
	next := 0
	for {
		var st sqlqueue.Stmt
		if handoff {
			var ks []string
			pick := func(k int) {
				if left[k] > 0 && len(ks) < batch {
					left[k]--
					ks = append(ks, fmt.Sprintf("key-%d", k))
				}
			}
			if scatter {
				for _, k := range rand.Perm(keys) {
					pick(k)
				}
			} else {
				for range keys {
					pick(next)
					next = (next + 1) % keys
				}
			}
			if len(ks) == 0 {
				break
			}
			st = d.ClaimKeys(q, 1, ks, nil, batch, batch, time.Minute, time.Minute, nil)
		} else {
			st = d.ClaimDirect(q, 1, batch, batch, time.Minute, time.Minute)
		}
		var refs []sqlqueue.Ref
		began := time.Now()
		run(st, func(rs *sql.Rows) {
			var (
				id             int64
				uuid           string
				headers, body  []byte
				attempts, stat int
			)
			if err := rs.Scan(&id, &uuid, &headers, &body, &attempts, &stat); err != nil {
				b.Fatal(err)
			}
			refs = append(refs, sqlqueue.Ref{ID: id, Owner: 1})
		})
		claimT += time.Since(began)
		if len(refs) == 0 {
			if handoff {
				b.Fatal("a hand-off claim found no head")
			}
			break
		}
		began = time.Now()
		run(d.Complete(q, refs), func(*sql.Rows) {})
		deleteT += time.Since(began)
		done += len(refs)
	}
	return claimT, deleteT, done
}
