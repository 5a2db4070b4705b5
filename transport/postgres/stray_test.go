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

// insertRaw writes a row as another tool would, bypassing the publisher,
// with lease_until now + lease, or NULL when lease is 0.
func insertRaw(t *testing.T, db *sql.DB, table string, state int, lease time.Duration) int64 {
	t.Helper()
	var until any
	if lease != 0 {
		until = time.Now().Add(lease)
	}
	var id int64
	err := db.QueryRow(`INSERT INTO `+table+` (uuid, headers, body, state, owner, lease_until) VALUES ($1, '{}', 'raw', $2, 1, $3) RETURNING id`,
		fmt.Sprintf("raw-%d-%v", state, lease), state, until).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Rows no statement would ever touch again — a fetched or processing state
// with no lease, a state outside 0, 1, 2 — end in the error table with
// their reason at the next sweep; pending and claimed rows stay.
func TestSweepDeadLettersStrayRows(t *testing.T) {
	db := openDB(t, 3)
	pub := newPub(t, db)
	publishN(t, pub, "stray", 2)
	src := newSource(t, db, "stray")
	table := src.Queue().Table
	ctx := context.Background()
	claimed, err := src.Claim(ctx, 1) // one fetched row with a lease; one pending
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %d, %v", len(claimed), err)
	}
	want := map[int64]string{
		insertRaw(t, db, table, 1, 0):         "stray row: state 1 with no lease",
		insertRaw(t, db, table, 2, 0):         "stray row: state 2 with no lease",
		insertRaw(t, db, table, 7, 0):         "stray row: state 7 is not a known state",
		insertRaw(t, db, table, 7, time.Hour): "stray row: state 7 is not a known state",
		// Its lease has passed: Recover, were it first, would make it pending.
		insertRaw(t, db, table, 7, -time.Hour): "stray row: state 7 is not a known state",
		insertRaw(t, db, table, -1, 0):         "stray row: state -1 is not a known state",
	}
	normal := insertRaw(t, db, table, 2, time.Hour) // a processing row with its lease: not stray

	res, err := src.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Ran || res.Stray != len(want) || res.Recovered != 0 || res.DeadLettered != 0 || res.Expired != 0 {
		t.Fatalf("sweep = %+v, want %d stray and nothing else", res, len(want))
	}
	rows, err := db.Query(`SELECT original_id, reason, queue_table, message_uuid, body FROM berth_errors`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[int64]string{}
	for rows.Next() {
		var (
			id                 int64
			reason, queue, uid string
			body               []byte
		)
		if err := rows.Scan(&id, &reason, &queue, &uid, &body); err != nil {
			t.Fatal(err)
		}
		if queue != src.Queue().Name || !strings.HasPrefix(uid, "raw-") || string(body) != "raw" {
			t.Errorf("error row %d = %s %s %q, want the raw row of %s", id, queue, uid, body, src.Queue().Name)
		}
		got[id] = reason
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("error table = %v\nwant %v", got, want)
	}
	if st := rowStates(t, db, table); st[sqlqueue.StatePending] != 1 || st[sqlqueue.StateFetched] != 1 || st[sqlqueue.StateProcessing] != 1 || len(st) != 3 {
		t.Fatalf("queue states after the sweep = %v, want the pending, the claimed and the leased row", st)
	}
	var state int
	if err := db.QueryRow(`SELECT state FROM `+table+` WHERE id = $1`, normal).Scan(&state); err != nil || state != 2 {
		t.Fatalf("leased processing row: state %d, %v; want it untouched", state, err)
	}
	if s := src.Stats(); s.Stray != int64(len(want)) || s.DeadLettered != int64(len(want)) {
		t.Fatalf("Stats.Stray %d, DeadLettered %d; want %d each", s.Stray, s.DeadLettered, len(want))
	}
	if res, err := src.Sweep(ctx); err != nil || res.Stray != 0 {
		t.Fatalf("second sweep = %+v, %v; want no stray", res, err)
	}
}

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
