package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

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
			`UPDATE "berth_q_orders" AS q SET state = 1, owner = $1, lease_until = now() + $2 * interval '1 millisecond', waiting = false WHERE q.id = ANY(ARRAY( SELECT p.id FROM "berth_q_orders" AS p WHERE p.state = 0 AND NOT p.waiting AND p.due_at <= now() AND (p.expires_at IS NULL OR p.expires_at > now()) AND (p.ordering_key IS NULL OR NOT EXISTS ( SELECT 1 FROM "berth_q_orders" AS e WHERE e.ordering_key = p.ordering_key AND e.id < p.id)) ORDER BY p.due_at, p.id LIMIT (SELECT $3::int) FOR UPDATE OF p SKIP LOCKED )) RETURNING q.id, q.uuid, q.headers, q.body, q.attempts`,
			[]any{int64(77), int64(2000), 5}},
		{"begin", d.Begin(q, refs, 30*time.Second),
			`UPDATE "berth_q_orders" AS q SET state = 2, attempts = q.attempts + 1, lease_until = now() + $3 * interval '1 millisecond' FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[])) AS r(id, owner) WHERE q.id = r.id AND q.owner = r.owner AND q.state + 0 = 1 RETURNING q.id, q.attempts`,
			[]any{[]int64{1, 2}, []int64{10, 20}, int64(30000)}},
		{"complete", d.Complete(q, refs),
			`DELETE FROM "berth_q_orders" AS q USING unnest((SELECT $1::bigint[]), (SELECT $2::bigint[])) AS r(id, owner) WHERE q.id = r.id AND q.owner = r.owner AND q.state + 0 = 2 RETURNING q.id`,
			[]any{[]int64{1, 2}, []int64{10, 20}}},
		{"release", d.Release(q, refs),
			`UPDATE "berth_q_orders" AS q SET state = 0, owner = NULL, lease_until = NULL FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[])) AS r(id, owner) WHERE q.id = r.id AND q.owner = r.owner AND q.state + 0 = 1 RETURNING q.id`,
			[]any{[]int64{1, 2}, []int64{10, 20}}},
		{"retry", d.Retry(q, []sqlqueue.RetryRef{{Ref: refs[0], Delay: time.Second, Line: "attempt 1\n"}}),
			`UPDATE "berth_q_orders" AS q SET state = 0, owner = NULL, lease_until = NULL, due_at = now() + r.delay_ms * interval '1 millisecond', headers = CASE WHEN q.headers !~ '^\s*\{' OR q.headers ~* '\\u(0000|d[89a-f])' THEN q.headers ELSE (q.headers::jsonb || jsonb_build_object('berth_attempt_errors', CASE WHEN length(coalesce(q.headers::jsonb ->> 'berth_attempt_errors', '') || r.line) <= 2000 THEN coalesce(q.headers::jsonb ->> 'berth_attempt_errors', '') || r.line ELSE substr(right(coalesce(q.headers::jsonb ->> 'berth_attempt_errors', '') || r.line, 2000), strpos(right(coalesce(q.headers::jsonb ->> 'berth_attempt_errors', '') || r.line, 2000), E'\n') + 1) END))::text END FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[]), (SELECT $3::bigint[]), (SELECT $4::text[])) AS r(id, owner, delay_ms, line) WHERE q.id = r.id AND q.owner = r.owner AND q.state + 0 = 2 RETURNING q.id`,
			[]any{[]int64{1}, []int64{10}, []int64{1000}, []string{"attempt 1\n"}}},
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

// The claim and the sweeper's statements run as prepared statements, and
// PostgreSQL may switch a prepared statement to its generic plan, planned
// without the LIMIT's value. That plan must still find rows through the
// indexes: a sequential scan makes every claim cost O(backlog) (measured:
// 11 ms instead of 0.6 ms for 64 rows of 20,000). DropExpired, run by the
// sweeper, takes the same shape and has the expiry index.
func TestGenericPlansUseIndexes(t *testing.T) {
	ctx, conn, q, _ := planQueue(t, "plans")
	d := postgres.Dialect{}
	if _, err := conn.ExecContext(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name  string
		types string
		st    sqlqueue.Stmt
		args  string
	}{
		{"claim", "bigint, bigint, int", d.Claim(q, 1, 64, time.Minute), "1, 60000, 64"},
		{"recover", "int, int", d.Recover(q, 5, 500), "5, 500"},
		{"drop expired", "int", d.DropExpired(q, 500), "500"},
	} {
		name := fmt.Sprintf("p%d", i)
		if _, err := conn.ExecContext(ctx, `PREPARE `+name+`(`+c.types+`) AS `+c.st.SQL); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		rows, err := conn.QueryContext(ctx, `EXPLAIN EXECUTE `+name+`(`+c.args+`)`)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		if p := strings.Join(plan, "\n"); strings.Contains(p, "Seq Scan") {
			t.Errorf("%s: the generic plan scans the whole table:\n%s", c.name, p)
		}
	}
}

// QueueExists names the indexes in the table's schema.
func TestQueueExistsNames(t *testing.T) {
	d := postgres.Dialect{}
	q := sqlqueue.QueueFor(d, sqlqueue.Tables{Schema: "Ops"}, "orders", "")
	got := d.QueueExists(q)
	want := []any{`"Ops"."berth_q_orders"`, `"Ops"."berth_q_orders_pending"`, `"Ops"."berth_q_orders_leased"`, `"Ops"."berth_q_orders_expiry"`, `"Ops"."berth_q_orders_key"`, `"Ops"."berth_q_orders_ready"`}
	if !reflect.DeepEqual(got.Args, want) {
		t.Fatalf("args = %#v, want %#v", got.Args, want)
	}
}

func TestMessagingSystem(t *testing.T) {
	if got := sqlqueue.MessagingSystem(postgres.Dialect{}); got != postgres.MessagingSystem {
		t.Errorf("sqlqueue.MessagingSystem(postgres.Dialect{}) = %q, want %q", got, postgres.MessagingSystem)
	}
}

// planQueue publishes 5,000 rows to topic on a fresh schema, analyzes the
// queue table and returns a dedicated connection for PREPARE and EXPLAIN.
func planQueue(t *testing.T, topic string) (context.Context, *sql.Conn, sqlqueue.Queue, sqlqueue.Names) {
	t.Helper()
	db := openDB(t, 2)
	pub := newPub(t, db)
	msgs := make([]*message.Message, 5000)
	for i := range msgs {
		msgs[i] = message.NewMessage(fmt.Sprint(i), []byte("x"))
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	d := postgres.Dialect{}
	q := sqlqueue.QueueFor(d, sqlqueue.Tables{}, topic, "")
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.ExecContext(ctx, `ANALYZE `+q.Table); err != nil {
		t.Fatal(err)
	}
	return ctx, conn, q, sqlqueue.NamesFor(d, sqlqueue.Tables{})
}
