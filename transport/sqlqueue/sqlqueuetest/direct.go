package sqlqueuetest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// skipNoDirect skips a case on a dialect that cannot claim straight into
// processing (its claims then all go through the lease gate).
func skipNoDirect(t *testing.T, h Harness) {
	t.Helper()
	if _, ok := h.Dialect.(sqlqueue.DirectDialect); !ok {
		t.Skipf("dialect %s does not implement sqlqueue.DirectDialect", h.Dialect.Name())
	}
}

// attemptsByID reads every row's attempts column by row id.
func attemptsByID(t *testing.T, db *sql.DB, table string) map[int64]int {
	t.Helper()
	rows, err := db.Query(`SELECT id, attempts FROM ` + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[int64]int{}
	for rows.Next() {
		var id int64
		var a int
		if err := rows.Scan(&id, &a); err != nil {
			t.Fatal(err)
		}
		m[id] = a
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// Rows claimed straight into processing count their attempt once, in the
// claim (no Begin), are settled and fenced like rows that passed Begin, and
// a release of one that never reached user code takes its attempt back.
// Rows beyond the direct count are fetched and pass the gate as before.
func testDirectClaim(t *testing.T, h Harness) {
	skipNoDirect(t, h)
	f := h.open(t)
	db := f.pool(t, 3)
	pub := f.newPub(t, db)
	PublishN(t, pub, "direct", 5)
	src := f.newSource(t, db, "direct")
	ctx := context.Background()
	ds, err := src.ClaimDirect(ctx, 5, 2)
	if err != nil || len(ds) != 5 {
		t.Fatalf("ClaimDirect = %d, %v; want 5 rows", len(ds), err)
	}
	for i, d := range ds { // in id order: the oldest are the started ones
		if want := i < 2; d.Started != want || d.Attempt != map[bool]int{true: 1, false: 0}[want] {
			t.Fatalf("row %d: started %v, attempt %d; want started %v with its attempt counted only then", i, d.Started, d.Attempt, want)
		}
	}
	q := src.Queue()
	if st := RowStates(t, db, q.Table); st[sqlqueue.StateProcessing] != 2 || st[sqlqueue.StateFetched] != 3 {
		t.Fatalf("states after ClaimDirect = %v, want 2 processing, 3 fetched", st)
	}
	if s := src.Stats(); s.StartedRows != 2 || s.Claims != 1 || s.Begins != 0 {
		t.Fatalf("stats = %d started rows, %d claims, %d begins; want 2, 1, 0", s.StartedRows, s.Claims, s.Begins)
	}
	// A started row is settled like a gated one: Complete deletes it.
	if err := src.Complete(ctx, ds[0]); err != nil {
		t.Fatalf("Complete of a started row = %v", err)
	}
	// A fetched row still passes the gate, counting its attempt there.
	if err := src.Begin(ctx, ds[2]); err != nil || ds[2].Attempt != 1 {
		t.Fatalf("Begin of a fetched row = %v, attempt %d; want nil, 1", err, ds[2].Attempt)
	}
	// Release hands back a started row that never reached user code with
	// its attempt taken back, and fetched rows untouched, in one call.
	if err := src.Release(ctx, []*transport.Delivery{ds[1], ds[3], ds[4]}); err != nil {
		t.Fatalf("Release of started and fetched rows = %v", err)
	}
	if err := src.Retry(ctx, ds[2], 0, ""); err != nil {
		t.Fatal(err)
	}
	if st := RowStates(t, db, q.Table); st[sqlqueue.StatePending] != 4 || len(st) != 1 {
		t.Fatalf("states after release and retry = %v, want 4 pending", st)
	}
	att := attemptsByID(t, db, q.Table)
	want := map[int64]int{rowID(t, ds[1].ID): 0, rowID(t, ds[2].ID): 1, rowID(t, ds[3].ID): 0, rowID(t, ds[4].ID): 0}
	for id, a := range want {
		if att[id] != a {
			t.Fatalf("attempts after release = %v, want %v", att, want)
		}
	}
	// Claimed again, all started: each attempt is counted once more.
	again, err := src.ClaimDirect(ctx, 10, 10)
	if err != nil || len(again) != 4 {
		t.Fatalf("second ClaimDirect = %d, %v; want 4", len(again), err)
	}
	for _, d := range again {
		if !d.Started || d.Attempt != want[rowID(t, d.ID)]+1 {
			t.Fatalf("row %s: started %v, attempt %d; want started at attempt %d", d.ID, d.Started, d.Attempt, want[rowID(t, d.ID)]+1)
		}
	}
	// Fenced like any processing row: once another owner has it, settling
	// and releasing it report the lease lost and touch nothing.
	if _, err := db.Exec(`UPDATE `+q.Table+` SET owner = owner + 1 WHERE id = `+f.ph(1), rowID(t, again[0].ID)); err != nil {
		t.Fatal(err)
	}
	if err := src.Complete(ctx, again[0]); !errors.Is(err, transport.ErrLeaseLost) {
		t.Fatalf("Complete of a taken-over started row = %v, want ErrLeaseLost", err)
	}
	if err := src.Release(ctx, again[:1]); !errors.Is(err, transport.ErrLeaseLost) {
		t.Fatalf("Release of a taken-over started row = %v, want ErrLeaseLost", err)
	}
	if att := attemptsByID(t, db, q.Table); att[rowID(t, again[0].ID)] != want[rowID(t, again[0].ID)]+1 {
		t.Fatalf("a fenced-off release changed the attempts: %v", att)
	}
	for _, d := range again[1:] {
		if err := src.Complete(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
}

// A subscriber at light load claims rows straight into processing; closed
// with one message held by user code and the others not yet read, it hands
// back the held one (its attempt stays counted: user code had it) and
// releases the others with their attempts taken back. The next subscriber
// gets all of them, each attempt counted once per delivery.
func testDirectClose(t *testing.T, h Harness) {
	skipNoDirect(t, h)
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	ids := PublishN(t, pub, "direct_close", 4)
	c := f.subConfig(db)
	c.Pipeline.Concurrency = 4
	c.Pipeline.DrainTimeout = 100 * time.Millisecond
	sub := f.newSubscriber(t, c)
	ch, err := sub.Subscribe(context.Background(), "direct_close")
	if err != nil {
		t.Fatal(err)
	}
	held := <-ch // never acked; the other three wait for the channel
	if a := held.Metadata.Get(transport.MetadataAttempt); a != "1" {
		t.Fatalf("first delivery at attempt %s, want 1", a)
	}
	q := sub.Queue("direct_close")
	// Waves of 1, 2 and 4 rows find 4, 3 and 1 free permits: every row
	// is claimed straight into processing.
	waitFor(t, 10*time.Second, "every row claimed", func() bool { return sub.Stats().ClaimedRows == 4 })
	if s := sub.Stats(); s.StartedRows != 4 || s.Begins != 0 {
		t.Fatalf("stats = %d started rows, %d begins; want 4, 0", s.StartedRows, s.Begins)
	}
	_ = sub.Close() // gives up on the held message after DrainTimeout
	if st := RowStates(t, db, q.Table); st[sqlqueue.StatePending] != 4 || len(st) != 1 {
		t.Fatalf("states after close = %v, want 4 pending", st)
	}
	var sum int
	for _, a := range attemptsByID(t, db, q.Table) {
		sum += a
	}
	if sum != 1 {
		t.Fatalf("attempts after close sum to %d; want 1 (the held message's; the unread ones never reached user code)", sum)
	}

	sub2 := f.newSubscriber(t, f.subConfig(db))
	ch2, err := sub2.Subscribe(context.Background(), "direct_close")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	timeout := time.After(30 * time.Second)
	for len(got) < 4 {
		select {
		case m := <-ch2:
			got[m.UUID] = m.Metadata.Get(transport.MetadataAttempt)
			m.Ack()
		case <-timeout:
			t.Fatalf("redelivered %d of 4", len(got))
		}
	}
	for _, id := range ids {
		want := "1"
		if id == held.UUID {
			want = "2"
		}
		if got[id] != want {
			t.Fatalf("redelivery attempts = %v; want %s at 2, the rest at 1", got, held.UUID)
		}
	}
}

// The sweeper treats rows claimed straight into processing as processing
// rows: once their lease has passed they return to pending with their
// attempt counted, while fetched rows return with none.
func testDirectRecovered(t *testing.T, h Harness) {
	skipNoDirect(t, h)
	f := h.open(t)
	db := f.pool(t, 3)
	pub := f.newPub(t, db)
	PublishN(t, pub, "direct_recover", 4)
	srcA := f.openSource(t, sqlqueue.SubscriberConfig{
		DB: db, Tables: f.env.Tables, SweepInterval: -1, FetchTimeout: time.Second, Lease: time.Second,
	}, "direct_recover")
	ds, err := srcA.ClaimDirect(context.Background(), 4, 2)
	if err != nil || len(ds) != 4 {
		t.Fatalf("ClaimDirect = %d, %v", len(ds), err)
	}
	started := map[string]bool{}
	for _, d := range ds {
		m, err := srcA.Map(d)
		if err != nil {
			t.Fatal(err)
		}
		started[m.UUID] = d.Started
	}
	// srcA is abandoned: its leases run out.
	c := f.subConfig(db)
	c.SweepInterval = 200 * time.Millisecond
	subB := f.newSubscriber(t, c)
	ch, err := subB.Subscribe(context.Background(), "direct_recover")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	timeout := time.After(30 * time.Second)
	for len(got) < 4 {
		select {
		case m := <-ch:
			got[m.UUID] = m.Metadata.Get(transport.MetadataAttempt)
			m.Ack()
		case <-timeout:
			t.Fatalf("recovered %d of 4", len(got))
		}
	}
	for id, s := range started {
		want := "1"
		if s {
			want = "2"
		}
		if got[id] != want {
			t.Fatalf("attempts on recovery = %v (started: %v); want the started rows at 2, the fetched at 1", got, started)
		}
	}
	if s := subB.Stats(); s.Recovered < 4 {
		t.Fatalf("Stats.Recovered = %d, want ≥ 4", s.Recovered)
	}
}
