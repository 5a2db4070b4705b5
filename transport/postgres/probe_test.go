package postgres_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The idle probe answers, per queue, whether a row is due, when the next
// delayed row falls due, and whether the table is empty, in one statement.
func TestMultiProbe(t *testing.T) {
	db := openDB(t, 2)
	pub := newPub(t, db)
	d := postgres.Dialect{}
	late := message.NewMessage("late", nil)
	late.Metadata.Set(sqlqueue.MetadataDelay, "1h")
	if err := pub.Publish("due", message.NewMessage("now", nil)); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("delayed", late); err != nil {
		t.Fatal(err)
	}
	// An empty queue: its table exists, with no row.
	if err := pub.Publish("empty", message.NewMessage("x", nil)); err != nil {
		t.Fatal(err)
	}
	qs := []sqlqueue.Queue{
		sqlqueue.QueueFor(d, sqlqueue.Tables{}, "due", ""),
		sqlqueue.QueueFor(d, sqlqueue.Tables{}, "delayed", ""),
		sqlqueue.QueueFor(d, sqlqueue.Tables{}, "empty", ""),
	}
	if _, err := db.Exec(`DELETE FROM ` + qs[2].Table); err != nil {
		t.Fatal(err)
	}
	st := d.MultiProbe(qs)
	rows, err := db.QueryContext(context.Background(), st.SQL, st.Args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type result struct {
		ready, empty bool
		next         sql.NullInt64
	}
	got := map[string]result{}
	for rows.Next() {
		var (
			name string
			r    result
		)
		if err := rows.Scan(&name, &r.ready, &r.next, &r.empty); err != nil {
			t.Fatal(err)
		}
		got[name] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if r := got[qs[0].Name]; !r.ready || r.next.Valid || r.empty {
		t.Errorf("due queue: %+v, want ready, no next, not empty", r)
	}
	if r := got[qs[1].Name]; r.ready || !r.next.Valid || r.empty ||
		r.next.Int64 < int64((time.Hour-time.Minute)/time.Millisecond) || r.next.Int64 > int64(time.Hour/time.Millisecond) {
		t.Errorf("delayed queue: %+v, want not ready, next about 1h in ms, not empty", r)
	}
	if r := got[qs[2].Name]; r.ready || r.next.Valid || !r.empty {
		t.Errorf("empty queue: %+v, want not ready, no next, empty", r)
	}
}
