package sqlite_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

func norm(s string) string { return strings.Join(strings.Fields(s), " ") }

func TestStatements(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	d := sqlite.Dialect{Now: func() time.Time { return now }}
	q := sqlqueue.QueueFor(d, sqlqueue.Tables{}, "orders", "")
	refs := []sqlqueue.Ref{{ID: 1, Owner: 10}, {ID: 2, Owner: 20}}
	for _, c := range []struct {
		name string
		st   sqlqueue.Stmt
		sql  string
		args []any
	}{
		{"claim", d.Claim(q, 77, 5, 2*time.Second),
			`UPDATE "berth_q_orders" SET state = 1, owner = ?, lease_until = ?, waiting = 0 WHERE id IN ( SELECT p.id FROM "berth_q_orders" AS p WHERE p.state = 0 AND p.waiting = 0 AND p.due_at <= ? AND (p.expires_at IS NULL OR p.expires_at > ?) AND (p.ordering_key IS NULL OR NOT EXISTS ( SELECT 1 FROM "berth_q_orders" AS e WHERE e.ordering_key = p.ordering_key AND e.id < p.id)) ORDER BY p.due_at, p.id LIMIT ? + 0 ) RETURNING id, uuid, headers, body, attempts`,
			[]any{int64(77), int64(1_002_000), int64(1_000_000), int64(1_000_000), 5}},
		{"begin", d.Begin(q, refs, 30*time.Second),
			`WITH r(id, owner) AS (VALUES (?, ?), (?, ?)) UPDATE "berth_q_orders" SET state = 2, attempts = attempts + 1, lease_until = ? WHERE state = 1 AND (id, owner) IN (SELECT id, owner FROM r) RETURNING id, attempts`,
			[]any{int64(1), int64(10), int64(2), int64(20), int64(1_030_000)}},
		{"complete", d.Complete(q, refs),
			`WITH r(id, owner) AS (VALUES (?, ?), (?, ?)) DELETE FROM "berth_q_orders" WHERE state = 2 AND (id, owner) IN (SELECT id, owner FROM r) RETURNING id`,
			[]any{int64(1), int64(10), int64(2), int64(20)}},
		{"release", d.Release(q, refs[:1]),
			`WITH r(id, owner) AS (VALUES (?, ?)) UPDATE "berth_q_orders" SET state = 0, owner = NULL, lease_until = NULL WHERE state = 1 AND (id, owner) IN (SELECT id, owner FROM r) RETURNING id`,
			[]any{int64(1), int64(10)}},
	} {
		if got := norm(c.st.SQL); got != c.sql {
			t.Errorf("%s SQL:\n got %s\nwant %s", c.name, got, c.sql)
		}
		if !reflect.DeepEqual(c.st.Args, c.args) {
			t.Errorf("%s args = %#v, want %#v", c.name, c.st.Args, c.args)
		}
	}
}
