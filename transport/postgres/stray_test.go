package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The stray statement reads the lease index, not the table: under the
// generic plan of the prepared statement as under a custom one.
func TestStrayPlanUsesLeaseIndex(t *testing.T) {
	db := openDB(t, 2)
	pub := newPub(t, db)
	msgs := make([]*message.Message, 5000)
	for i := range msgs {
		msgs[i] = message.NewMessage(fmt.Sprint(i), []byte("x"))
	}
	if err := pub.Publish("stray_plan", msgs...); err != nil {
		t.Fatal(err)
	}
	d := postgres.Dialect{}
	q := sqlqueue.QueueFor(d, sqlqueue.Tables{}, "stray_plan", "")
	n := sqlqueue.NamesFor(d, sqlqueue.Tables{})
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `ANALYZE `+q.Table); err != nil {
		t.Fatal(err)
	}
	sts := d.DeadLetterStray(n, q, 1000)
	if len(sts) != 1 {
		t.Fatalf("%d statements, want 1", len(sts))
	}
	if _, err := conn.ExecContext(ctx, `PREPARE stray(int, text) AS `+sts[0].SQL); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		if _, err := conn.ExecContext(ctx, `SET plan_cache_mode = `+mode); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.QueryContext(ctx, `EXPLAIN EXECUTE stray(1000, 'x')`)
		if err != nil {
			t.Fatal(err)
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
		p := strings.Join(plan, "\n")
		if strings.Contains(p, "Seq Scan") || !strings.Contains(p, q.Name+"_leased") {
			t.Errorf("%s: the stray statement does not read the lease index:\n%s", mode, p)
		}
	}
}
