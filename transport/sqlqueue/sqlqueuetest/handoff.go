package sqlqueuetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport/sqlqueue"
)

// skipNoKeyClaimer skips a case on a dialect that cannot claim by key.
func skipNoKeyClaimer(t *testing.T, h Harness) sqlqueue.KeyClaimer {
	t.Helper()
	kc, ok := h.Dialect.(sqlqueue.KeyClaimer)
	if !ok {
		t.Skipf("dialect %s does not implement sqlqueue.KeyClaimer", h.Dialect.Name())
	}
	return kc
}

// skipNoHeadPromoter skips a case on a dialect without the waiting marker.
func skipNoHeadPromoter(t *testing.T, h Harness) {
	t.Helper()
	if _, ok := h.Dialect.(sqlqueue.HeadPromoter); !ok {
		t.Skipf("dialect %s does not implement sqlqueue.HeadPromoter", h.Dialect.Name())
	}
}

// testKeyClaimTakesHeads runs ClaimKeys itself: per key it claims the
// lowest row only when that row is pending and due (a key whose head is
// processing or delayed gives nothing, a key without rows nothing), and an
// ack riding on it (an AckRider's done rows) is left out of the head
// check only when its fenced delete took place. A key's bound (from, the
// settled head's id) leaves that head in the check too when its delete
// was fenced out.
func testKeyClaimTakesHeads(t *testing.T, h Harness) {
	kc := skipNoKeyClaimer(t, h)
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	src := f.newSource(t, db, "keyclaim")
	q := src.Queue()
	ctx := context.Background()
	publish := func(ms ...*message.Message) {
		t.Helper()
		if err := pub.Publish("keyclaim", ms...); err != nil {
			t.Fatal(err)
		}
	}
	// a1 goes into processing; a2 waits behind it.
	publish(keyed("a", "a1"), keyed("a", "a2"))
	ds, err := src.ClaimDirect(ctx, 10, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("ClaimDirect = %d rows, %v; want a1 alone", len(ds), err)
	}
	a1 := rowID(t, ds[0].ID)
	var owner int64
	if err := db.QueryRow(`SELECT owner FROM `+q.Table+` WHERE id = `+f.ph(1), a1).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	b1 := keyed("b", "b1")
	b1.Metadata.Set(sqlqueue.MetadataDelay, "1h")
	publish(b1, keyed("b", "b2"), keyed("c", "c1"), keyed("c", "c2"))

	claimKeys := func(done []sqlqueue.Ref, from ...int64) (claimed []string, acked []int64) {
		t.Helper()
		st := kc.ClaimKeys(q, 7, []string{"a", "b", "c", "d"}, from, 10, 0, time.Minute, time.Minute, done)
		rows, err := db.QueryContext(ctx, st.SQL, st.Args...)
		if err != nil {
			t.Fatalf("ClaimKeys: %v", err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id              int64
				uuid            string
				headers, body   []byte
				attempts, state int
			)
			if err := rows.Scan(&id, &uuid, &headers, &body, &attempts, &state); err != nil {
				t.Fatal(err)
			}
			if state == sqlqueue.StateAcked {
				acked = append(acked, id)
				continue
			}
			claimed = append(claimed, string(body))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(claimed)
		return claimed, acked
	}
	// a's head is processing, b's is delayed, d has no rows: c1 only.
	if got, _ := claimKeys(nil); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("ClaimKeys claimed %v, want [c1]", got)
	}
	// c1 is fetched now: c2 stays behind it.
	if got, _ := claimKeys(nil); len(got) != 0 {
		t.Fatalf("ClaimKeys claimed %v behind heads in flight, want nothing", got)
	}
	if _, ok := h.Dialect.(sqlqueue.AckRider); !ok {
		return
	}
	// An ack fenced out (another owner) deletes nothing and hides nothing.
	if got, acked := claimKeys([]sqlqueue.Ref{{ID: a1, Owner: owner + 1}}); len(got) != 0 || len(acked) != 0 {
		t.Fatalf("ClaimKeys with a fenced-out ack claimed %v, acked %v; want nothing", got, acked)
	}
	// The same with a's bound at a1: a1 is still there, so still a's head.
	if got, acked := claimKeys([]sqlqueue.Ref{{ID: a1, Owner: owner + 1}}, a1, 0, 0, 0); len(got) != 0 || len(acked) != 0 {
		t.Fatalf("ClaimKeys bounded at a1 with a fenced-out ack claimed %v, acked %v; want nothing", got, acked)
	}
	// a1's own ack rides: it is deleted, and a2 is a's head in the same
	// statement (the bound at a1, as the source gives it).
	got, acked := claimKeys([]sqlqueue.Ref{{ID: a1, Owner: owner}}, a1, 0, 0, 0)
	if !slices.Equal(got, []string{"a2"}) || !slices.Equal(acked, []int64{a1}) {
		t.Fatalf("ClaimKeys with a1's ack claimed %v, acked %v; want [a2], [%d]", got, acked, a1)
	}
}

// testHotKeysHandedOff drains two hot keys through a Subscriber whose
// empty delay and idle probe are longer than the test: every message but
// each key's first is claimed by the hand-off of its key (ClaimKeys, one
// statement for the ack and the next row where acks ride), in publish
// order per key, and almost no claim reads the backlog. Before the
// hand-off, each settled head woke a full claim: a claim per message, none
// of them by key.
func testHotKeysHandedOff(t *testing.T, h Harness) {
	skipNoKeyClaimer(t, h)
	const perKey = 40
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	var ms []*message.Message
	for i := range perKey {
		ms = append(ms, keyed("a", fmt.Sprintf("a-%03d", i)), keyed("b", fmt.Sprintf("b-%03d", i)))
	}
	c := f.subConfig(db)
	c.SweepInterval = -1
	c.IdleProbeMax = time.Hour
	c.Pipeline.Concurrency = 8
	c.Pipeline.EmptyDelay = time.Hour
	sub := f.newSubscriber(t, c)
	if err := sub.SubscribeInitialize("hot"); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("hot", ms...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got = map[string][]string{}
	)
	n := 0
	deadline := time.After(time.Minute)
	for n < 2*perKey {
		select {
		case m := <-ch:
			p := string(m.Payload)
			mu.Lock()
			got[p[:1]] = append(got[p[:1]], p)
			mu.Unlock()
			m.Ack()
			n++
		case <-deadline:
			t.Fatalf("handled %d of %d within a minute (stats %+v)", n, 2*perKey, sub.Stats())
		}
	}
	for _, k := range []string{"a", "b"} {
		if !slices.IsSorted(got[k]) || len(got[k]) != perKey {
			t.Fatalf("key %s handled as %s; want its %d messages in publish order", k, strings.Join(got[k], " "), perKey)
		}
	}
	// The last acks may still be on their way; the claims are done.
	st := sub.Stats()
	full := st.Claims - st.KeyClaims
	if st.KeyClaims < perKey || full > 20 {
		t.Fatalf("%d claims by key and %d full claims for %d messages of two hot keys; want most by key (≥ %d) and at most 20 full (stats %+v)",
			st.KeyClaims, full, 2*perKey, perKey, st)
	}
	t.Logf("%d messages: %d claims by key, %d full claims, %d acks ridden", 2*perKey, st.KeyClaims, full, st.RiddenAcks)
}

// testWaitingHeadPromoted checks the waiting marker (see
// sqlqueue.HeadPromoter): a keyed row published behind an unsettled row of
// its key stays out of the full claim even once it heads its key, until a
// hand-off claims it or the sweeper promotes it. Here its predecessor is
// deleted by hand (as an operator's cancel, which hands nothing off): the
// full claim does not see it, the sweep promotes it (and no other row),
// and the next full claim takes it. Before the marker the full claim read
// every row behind a key's head and took a2 at once.
func testWaitingHeadPromoted(t *testing.T, h Harness) {
	skipNoHeadPromoter(t, h)
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	src := f.newSource(t, db, "promote")
	q := src.Queue()
	ctx := context.Background()
	if err := pub.Publish("promote", keyed("a", "a1"), keyed("a", "a2"), keyed("a", "a3"), keyed("b", "b1")); err != nil {
		t.Fatal(err)
	}
	ds, got := ClaimPayloads(t, src, 10)
	if !slices.Equal(got, []string{"a1", "b1"}) {
		t.Fatalf("first claim took %v, want [a1 b1]", got)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM `+q.Table+` WHERE id = `+f.ph(1), rowID(t, ds[0].ID)); err != nil {
		t.Fatal(err)
	}
	if _, got := ClaimPayloads(t, src, 10); len(got) != 0 {
		t.Fatalf("a full claim took %v: a2 was published behind a1 and waits for a hand-off or a sweep", got)
	}
	res, err := src.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Promoted != 1 {
		t.Fatalf("sweep promoted %d rows, want 1 (a2; a3 still waits behind it): %+v", res.Promoted, res)
	}
	if _, got := ClaimPayloads(t, src, 10); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("claim after the sweep took %v, want [a2]", got)
	}
	if res, err := src.Sweep(ctx); err != nil || res.Promoted != 0 {
		t.Fatalf("a second sweep promoted %d rows (%v); want none: a3 waits behind a2 in flight", res.Promoted, err)
	}
}

// testDelayedKeyedRowReady checks that a delayed keyed row is never
// waiting: once its key's head is gone it is taken by a full claim when it
// falls due, with no hand-off and no sweep (this case runs neither). A
// hand-off that finds a head not yet due leaves it, and nothing else would
// make a waiting row claimable before the next sweep.
func testDelayedKeyedRowReady(t *testing.T, h Harness) {
	skipNoHeadPromoter(t, h)
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	src := f.newSource(t, db, "delayedkey")
	q := src.Queue()
	ctx := context.Background()
	a2 := keyed("a", "a2")
	a2.Metadata.Set(sqlqueue.MetadataDelay, "300ms")
	if err := pub.Publish("delayedkey", keyed("a", "a1"), a2); err != nil {
		t.Fatal(err)
	}
	ds, got := ClaimPayloads(t, src, 10)
	if !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("first claim took %v, want [a1]", got)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM `+q.Table+` WHERE id = `+f.ph(1), rowID(t, ds[0].ID)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a full claim to take a2 once due", func() bool {
		_, got := ClaimPayloads(t, src, 10)
		if len(got) > 0 && !slices.Equal(got, []string{"a2"}) {
			t.Fatalf("claim took %v, want [a2]", got)
		}
		return len(got) == 1
	})
}

// testCloseReleasesFreedKeys checks that a source closing after it settled
// a key's head, before its listener claimed the key's next row, leaves
// that row to other sources' full claims: the waiting row is promoted at
// Close, not at the next sweep (none runs here), so a rolling restart
// does not stall a key for a sweep interval.
func testCloseReleasesFreedKeys(t *testing.T, h Harness) {
	skipNoHeadPromoter(t, h)
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	ctx := context.Background()
	if err := pub.Publish("closefreed", keyed("a", "a1"), keyed("a", "a2")); err != nil {
		t.Fatal(err)
	}
	first := f.newSource(t, db, "closefreed")
	ds, got := ClaimPayloads(t, first, 10)
	if !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("first claim took %v, want [a1]", got)
	}
	if !ds[0].Started {
		if err := first.Begin(ctx, ds[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Complete(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second := f.newSource(t, db, "closefreed")
	if _, got := ClaimPayloads(t, second, 10); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("after the first source closed, a full claim took %v, want [a2]", got)
	}
}
