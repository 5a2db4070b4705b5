package sqlqueuetest

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/sqlqueue"
)

// stray is a row that SweepDeadLettersStrayRows writes by hand, and the
// reason its error row must carry (empty: the row is not stray).
type stray struct {
	state   any
	lease   time.Duration
	noOwner bool
	raw     any // lease_until written as is (Harness.StrayLeases), when set
	reason  string
}

// strayRows are the rows the case writes: the kit's own, two for each of
// h.StrayStates, and last a processing row with its lease, which is not
// stray.
func strayRows(h Harness) []stray {
	lost := func(state int) stray {
		return stray{state: state, reason: fmt.Sprintf("stray row: state %d with no lease", state)}
	}
	unknown := func(state any, lease time.Duration) stray {
		return stray{state: state, lease: lease, reason: fmt.Sprintf("stray row: state %v is not a known state", state)}
	}
	rows := []stray{
		lost(sqlqueue.StateFetched),
		lost(sqlqueue.StateProcessing),
		unknown(7, 0),
		unknown(7, time.Hour),
		// Its lease has passed: Recover, were it first, would make it pending.
		unknown(7, -time.Hour),
	}
	for _, s := range h.StrayStates {
		rows = append(rows, unknown(s, 0), unknown(s, time.Hour))
	}
	// No claim leaves a fetched or processing row without an owner: its
	// lease, an hour ahead, would be waited out for nobody.
	for _, state := range []int{sqlqueue.StateFetched, sqlqueue.StateProcessing} {
		rows = append(rows, stray{state: state, lease: time.Hour, noOwner: true, reason: fmt.Sprintf("stray row: state %d with no owner", state)})
	}
	for _, v := range h.StrayLeases {
		rows = append(rows, stray{state: sqlqueue.StateProcessing, lease: time.Hour, raw: v,
			reason: fmt.Sprintf("stray row: state %d with a lease that is not a time", sqlqueue.StateProcessing)})
	}
	return append(rows, stray{state: sqlqueue.StateProcessing, lease: time.Hour})
}

// Rows no statement would ever touch again (a fetched or processing state
// with no lease, a state outside 0, 1, 2 whatever its lease) end in the
// error table with their reason at the next sweep; pending, claimed and
// leased processing rows stay.
func testSweepStray(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 3)
	pub := f.newPub(t, db)
	published := PublishN(t, pub, "stray", 2)
	c := f.subConfig(db)
	c.SweepInterval = -1
	c.Pipeline.MaxAttempts = 3 // the sweep also runs DeadLetterExpired, which must take none of these rows
	src := f.openSource(t, c, "stray")
	q := src.Queue()
	ctx := context.Background()
	claimed, err := src.Claim(ctx, 1) // one fetched row with a lease; one pending
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %d, %v", len(claimed), err)
	}
	m, err := src.Map(claimed[0])
	if err != nil {
		t.Fatal(err)
	}
	stay := map[string]string{} // uuid → state of the rows the sweep leaves
	for _, u := range published {
		stay[u] = fmt.Sprint(sqlqueue.StatePending)
	}
	stay[m.UUID] = fmt.Sprint(sqlqueue.StateFetched)
	want := map[int64]string{}
	for i, s := range strayRows(h) {
		uuid := fmt.Sprintf("raw-%d-%v-%v", i, s.state, s.lease)
		owner := int64(1)
		if s.noOwner {
			owner = 0
		}
		id := f.insertStray(t, db, q, uuid, s.state, s.lease, owner)
		if s.raw != nil {
			if _, err := db.Exec(`UPDATE `+q.Table+` SET lease_until = `+f.ph(1)+` WHERE id = `+f.ph(2), s.raw, id); err != nil {
				t.Fatal(err)
			}
		}
		if s.reason == "" {
			stay[uuid] = fmt.Sprint(s.state)
		} else {
			want[id] = s.reason
		}
	}

	res, err := src.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Ran || res.Stray != len(want) || res.Recovered != 0 || res.DeadLettered != 0 || res.Expired != 0 {
		t.Fatalf("sweep = %+v, want %d stray and nothing else", res, len(want))
	}
	if got := f.errorReasons(t, db, q); !reflect.DeepEqual(got, want) {
		t.Fatalf("error table = %v\nwant %v", got, want)
	}
	if left := queueStates(t, db, q.Table); !reflect.DeepEqual(left, stay) {
		t.Fatalf("queue after the sweep = %v\nwant %v (the pending, the claimed and the leased processing row, untouched)", left, stay)
	}
	if s := src.Stats(); s.Stray != int64(len(want)) || s.DeadLettered != int64(len(want)) {
		t.Fatalf("Stats.Stray %d, DeadLettered %d; want %d each", s.Stray, s.DeadLettered, len(want))
	}
	if res, err := src.Sweep(ctx); err != nil || res.Stray != 0 {
		t.Fatalf("second sweep = %+v, %v; want no stray", res, err)
	}
}

// insertStray writes a row as another tool would, with headers {}, body
// "raw" and the given state, lease and owner (0: none), and returns its id.
func (f *fixture) insertStray(t *testing.T, db *sql.DB, q sqlqueue.Queue, uuid string, state any, lease time.Duration, owner int64) int64 {
	t.Helper()
	f.insert(t, db, q, RawRow{UUID: uuid, Headers: "{}", Body: []byte("raw"), State: state, Owner: owner, Lease: lease})
	var id int64
	if err := db.QueryRow(`SELECT id FROM `+q.Table+` WHERE uuid = `+f.ph(1), uuid).Scan(&id); err != nil {
		t.Fatalf("id of %q: %v", uuid, err)
	}
	return id
}

// errorReasons returns the reasons in the error table by original row id,
// and fails t for an error row that is not one of q's raw rows.
func (f *fixture) errorReasons(t *testing.T, db *sql.DB, q sqlqueue.Queue) map[int64]string {
	t.Helper()
	rows, err := db.Query(`SELECT original_id, reason, queue_table, message_uuid, body FROM ` + f.errors)
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
		if queue != q.Name || !strings.HasPrefix(uid, "raw-") || string(body) != "raw" {
			t.Errorf("error row %d = %s %s %q, want the raw row of %s", id, queue, uid, body, q.Name)
		}
		got[id] = reason
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// queueStates returns table's rows' states by uuid, each as it prints: a
// state the column holds as text (SQLite) reads back too.
func queueStates(t *testing.T, db *sql.DB, table string) map[string]string {
	t.Helper()
	rows, err := db.Query(`SELECT uuid, state FROM ` + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var (
			uuid  string
			state any
		)
		if err := rows.Scan(&uuid, &state); err != nil {
			t.Fatal(err)
		}
		if b, ok := state.([]byte); ok {
			state = string(b)
		}
		m[uuid] = fmt.Sprint(state)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}
