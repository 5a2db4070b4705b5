package sqlqueuetest

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// skipNoRider skips a case on a dialect whose claims cannot carry acks.
func skipNoRider(t *testing.T, h Harness) {
	t.Helper()
	if _, ok := h.Dialect.(sqlqueue.AckRider); !ok {
		t.Skipf("dialect %s does not implement sqlqueue.AckRider", h.Dialect.Name())
	}
}

// rideSource is a source whose acks wait up to a second for a claim (the
// longest AckHold), so that a case's claims, not the hold, carry them.
func (f *fixture) rideSource(t *testing.T, db *sql.DB, topic string, hold time.Duration) *sqlqueue.Source {
	t.Helper()
	c := f.subConfig(db)
	c.SweepInterval = -1
	c.AckHold = hold
	return f.openSource(t, c, topic)
}

// completeAsync runs Complete on each delivery, each on a goroutine of its
// own, and returns their outcomes in order once all have returned.
func completeAsync(src *sqlqueue.Source, ds []*transport.Delivery) <-chan []error {
	out := make(chan []error, 1)
	errs := make([]error, len(ds))
	var left atomic.Int64
	left.Add(int64(len(ds)))
	for i, d := range ds {
		go func() {
			errs[i] = src.Complete(context.Background(), d)
			if left.Add(-1) == 0 {
				out <- errs
			}
		}()
	}
	return out
}

// At light load an ack waits for the source's next claim and goes in its
// statement: the row is deleted, fenced like Complete's (a row another
// owner took reads as lost and stays), with no Complete statement of its
// own; the claim's own rows are claimed as usual. An ack no claim comes for
// goes alone when its hold ends.
func testAcksRideClaims(t *testing.T, h Harness) {
	skipNoRider(t, h)
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	PublishN(t, pub, "ride", 3)
	src := f.rideSource(t, db, "ride", time.Second)
	ctx := context.Background()
	ds, err := src.ClaimDirect(ctx, 10, 10) // short: 3 of 10, so acks may wait
	if err != nil || len(ds) != 3 {
		t.Fatalf("ClaimDirect = %d, %v; want 3 rows", len(ds), err)
	}
	q := src.Queue()
	// Another owner takes the third row: its ack must not delete it.
	if _, err := db.Exec(`UPDATE `+q.Table+` SET owner = owner + 1 WHERE id = `+f.ph(1), rowID(t, ds[2].ID)); err != nil {
		t.Fatal(err)
	}
	done := completeAsync(src, ds)
	waitFor(t, 5*time.Second, "the acks to wait for a claim", func() bool { return src.AcksWaiting() == 3 })
	PublishN(t, pub, "ride", 2)
	claimed, err := src.ClaimDirect(ctx, 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	outcome := <-done
	if outcome[0] != nil || outcome[1] != nil || !errors.Is(outcome[2], transport.ErrLeaseLost) {
		t.Fatalf("ack outcomes = %v; want nil, nil, ErrLeaseLost", outcome)
	}
	if s := src.Stats(); s.RiddenAcks != 2 || s.Completes != 0 {
		t.Fatalf("stats: %d acks ridden, %d Complete statements; want 2 and 0 (the claims carried them)", s.RiddenAcks, s.Completes)
	}
	if len(claimed) != 2 {
		t.Fatalf("the claims carrying the acks claimed %d rows, want the 2 published since", len(claimed))
	}
	if st := RowStates(t, db, q.Table); st[sqlqueue.StateProcessing] != 3 || len(st) != 1 {
		t.Fatalf("row states = %v; want the taken-over row and the 2 new ones processing", st)
	}
	// No claim follows: the ack goes alone when its hold ends. (A source
	// settles any delivery whose claim token still owns its row.)
	alone := f.rideSource(t, db, "ride", 50*time.Millisecond)
	if _, err := alone.ClaimDirect(ctx, 10, 10); err != nil { // empty: acks may wait
		t.Fatal(err)
	}
	aloneDone := completeAsync(alone, claimed[:1])
	waitFor(t, 5*time.Second, "the ack to wait for a claim", func() bool { return alone.AcksWaiting() == 1 })
	if err := <-aloneDone; err[0] != nil {
		t.Fatalf("Complete after its hold = %v", err[0])
	}
	if s := alone.Stats(); s.Completes != 1 || s.RiddenAcks != 0 {
		t.Fatalf("stats after the hold = %d Complete statements, %d ridden; want 1 and 0", s.Completes, s.RiddenAcks)
	}
	for _, err := range <-completeAsync(src, claimed[1:]) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := RowStates(t, db, q.Table); st[sqlqueue.StateProcessing] != 1 || len(st) != 1 {
		t.Fatalf("row states at the end = %v; want only the taken-over row", st)
	}
}

// A subscriber at light load (one message at a time, each published after
// the previous was handled) carries its acks on the claims the next
// messages' wake-ups start, and loses none at Close.
func testAcksRideSubscriber(t *testing.T, h Harness) {
	skipNoRider(t, h)
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	c := f.subConfig(db)
	c.AckHold = 500 * time.Millisecond
	sub := f.newSubscriber(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, "ride-sub")
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if err := pub.Publish("ride-sub", message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-msgs:
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d not delivered", i)
		}
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	st := sub.Stats()
	if st.RiddenAcks == 0 {
		t.Fatalf("no ack rode on a claim in %d messages published one at a time (stats %+v)", n, st)
	}
	if left := RowStates(t, db, sub.Queue("ride-sub").Table); len(left) != 0 {
		t.Fatalf("rows left after Close = %v; every acked row must be deleted", left)
	}
}
