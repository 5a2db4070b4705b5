package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

func openFile(t *testing.T) *sql.DB {
	t.Helper()
	db, closer, err := sqlite.Open(filepath.Join(t.TempDir(), "stray.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	return db
}

// insertRaw writes a row as another tool would, bypassing the publisher,
// with lease_until now + lease, or NULL when lease is 0.
func insertRaw(t *testing.T, db *sql.DB, table string, state any, lease time.Duration) int64 {
	t.Helper()
	var until any
	if lease != 0 {
		until = time.Now().Add(lease).UnixMilli()
	}
	var id int64
	err := db.QueryRow(`INSERT INTO `+table+` (uuid, headers, body, state, owner, created_at, due_at, lease_until) VALUES (?, '{}', 'raw', ?, 1, 0, 0, ?) RETURNING id`,
		fmt.Sprintf("raw-%v-%v", state, lease), state, until).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Rows no statement would ever touch again — a fetched or processing state
// with no lease, a state outside 0, 1, 2 — end in the error table with
// their reason at the next sweep; pending and claimed rows stay.
func TestSweepDeadLettersStrayRows(t *testing.T) {
	db := openFile(t)
	pub, err := sqlqueue.NewPublisher(sqlqueue.PublisherConfig{DB: db, Dialect: sqlite.Dialect{}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish("stray", message.NewMessage("a", []byte("a")), message.NewMessage("b", []byte("b"))); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src, err := sqlqueue.NewSource(ctx, sqlqueue.SubscriberConfig{DB: db, Dialect: sqlite.Dialect{}, SweepInterval: -1}, "stray")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	table := src.Queue().Table
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
		insertRaw(t, db, table, 7, -time.Hour):     "stray row: state 7 is not a known state",
		insertRaw(t, db, table, -1, 0):             "stray row: state -1 is not a known state",
		insertRaw(t, db, table, "done", time.Hour): "stray row: state done is not a known state",
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
	var left []string
	lrows, err := db.Query(`SELECT id, state FROM ` + table + ` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer lrows.Close()
	for lrows.Next() {
		var id, state int64
		if err := lrows.Scan(&id, &state); err != nil {
			t.Fatal(err)
		}
		left = append(left, fmt.Sprintf("%d:%d", id, state))
	}
	if w := []string{claimed[0].ID + ":1", "2:0", fmt.Sprintf("%d:2", normal)}; !reflect.DeepEqual(left, w) {
		t.Fatalf("queue after the sweep = %v, want %v (the claimed, the pending and the leased row)", left, w)
	}
	if s := src.Stats(); s.Stray != int64(len(want)) || s.DeadLettered != int64(len(want)) {
		t.Fatalf("Stats.Stray %d, DeadLettered %d; want %d each", s.Stray, s.DeadLettered, len(want))
	}
	if res, err := src.Sweep(ctx); err != nil || res.Stray != 0 {
		t.Fatalf("second sweep = %+v, %v; want no stray", res, err)
	}
}

// Both stray statements read the lease index, without statistics (Berth
// never runs ANALYZE on SQLite), never scanning the table.
func TestStrayPlanUsesLeaseIndex(t *testing.T) {
	db := openFile(t)
	d := sqlite.Dialect{}
	ctx := context.Background()
	src, err := sqlqueue.NewSource(ctx, sqlqueue.SubscriberConfig{DB: db, Dialect: d, SweepInterval: -1}, "stray_plan")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	q := src.Queue()
	n := sqlqueue.NamesFor(d, sqlqueue.Tables{})
	// The stray rows' move, and DeadLetterExpired's select (the first
	// statement: "state <> 0" repeats the index's filter, which SQLite
	// does not infer from "state = 2").
	sts := append(d.DeadLetterStray(n, q, 1000), d.DeadLetterExpired(n, q, 3, "r", 1000)[0])
	for i, st := range sts {
		rows, err := db.Query(`EXPLAIN QUERY PLAN `+st.SQL, st.Args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		p := strings.Join(plan, "\n")
		if !strings.Contains(p, "USING INDEX "+q.Name+"_leased") || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("statement %d does not read the lease index in its order:\n%s", i, p)
		}
		for _, line := range plan {
			if line == "SCAN "+q.Name {
				t.Errorf("statement %d scans the table:\n%s", i, p)
			}
		}
	}
}
