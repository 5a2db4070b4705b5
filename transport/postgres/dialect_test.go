package postgres_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

func norm(s string) string { return strings.Join(strings.Fields(s), " ") }

// Pins the text and parameter order of the receive-path statements.
func TestStatements(t *testing.T) {
	d := postgres.Dialect{}
	q := sqlqueue.QueueFor(d, sqlqueue.Tables{}, "orders", "")
	refs := []sqlqueue.Ref{{ID: 1, Owner: 10}, {ID: 2, Owner: 20}}
	for _, c := range []struct {
		name string
		st   sqlqueue.Stmt
		sql  string
		args []any
	}{
		{"claim", d.Claim(q, 77, 5, 2*time.Second),
			`UPDATE "berth_q_orders" AS q SET state = 1, owner = $1, lease_until = now() + $2 * interval '1 millisecond' WHERE q.id IN ( SELECT id FROM "berth_q_orders" WHERE state = 0 AND due_at <= now() AND (expires_at IS NULL OR expires_at > now()) ORDER BY due_at, id LIMIT $3 FOR UPDATE SKIP LOCKED ) RETURNING q.id, q.uuid, q.headers, q.body, q.attempts`,
			[]any{int64(77), int64(2000), 5}},
		{"begin", d.Begin(q, refs, 30*time.Second),
			`UPDATE "berth_q_orders" AS q SET state = 2, attempts = q.attempts + 1, lease_until = now() + $3 * interval '1 millisecond' FROM unnest($1::bigint[], $2::bigint[]) AS r(id, owner) WHERE q.id = r.id AND q.owner = r.owner AND q.state = 1 RETURNING q.id, q.attempts`,
			[]any{[]int64{1, 2}, []int64{10, 20}, int64(30000)}},
		{"complete", d.Complete(q, refs),
			`DELETE FROM "berth_q_orders" AS q USING unnest($1::bigint[], $2::bigint[]) AS r(id, owner) WHERE q.id = r.id AND q.owner = r.owner AND q.state = 2 RETURNING q.id`,
			[]any{[]int64{1, 2}, []int64{10, 20}}},
		{"release", d.Release(q, refs),
			`UPDATE "berth_q_orders" AS q SET state = 0, owner = NULL, lease_until = NULL FROM unnest($1::bigint[], $2::bigint[]) AS r(id, owner) WHERE q.id = r.id AND q.owner = r.owner AND q.state = 1 RETURNING q.id`,
			[]any{[]int64{1, 2}, []int64{10, 20}}},
		{"retry", d.Retry(q, []sqlqueue.RetryRef{{Ref: refs[0], Delay: time.Second}}),
			`UPDATE "berth_q_orders" AS q SET state = 0, owner = NULL, lease_until = NULL, due_at = now() + r.delay_ms * interval '1 millisecond' FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS r(id, owner, delay_ms) WHERE q.id = r.id AND q.owner = r.owner AND q.state = 2 RETURNING q.id`,
			[]any{[]int64{1}, []int64{10}, []int64{1000}}},
	} {
		if got := norm(c.st.SQL); got != c.sql {
			t.Errorf("%s SQL:\n got %s\nwant %s", c.name, got, c.sql)
		}
		if !reflect.DeepEqual(c.st.Args, c.args) {
			t.Errorf("%s args = %#v, want %#v", c.name, c.st.Args, c.args)
		}
	}
	dl := d.DeadLetter(sqlqueue.NamesFor(d, sqlqueue.Tables{}), q, refs[0], "why")
	if len(dl) != 1 || !reflect.DeepEqual(dl[0].Args, []any{int64(1), int64(10), "berth_q_orders", "why"}) ||
		!strings.Contains(norm(dl[0].SQL), "WHERE id = $1 AND owner = $2 AND state IN (1, 2)") {
		t.Errorf("dead-letter = %#v", dl)
	}
}
