package sqlqueuetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

func testLeaseLost(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 3)
	pub := f.newPub(t, db)
	PublishN(t, pub, "lease_lost", 2)
	src := f.newSource(t, db, "lease_lost")
	ds, err := src.Claim(context.Background(), 2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("claim = %d, %v", len(ds), err)
	}
	// Another instance took the first row over (e.g. the sweeper returned it
	// and someone re-claimed it): its owner token changed.
	if _, err := db.Exec(`UPDATE `+src.Queue().Table+` SET owner = owner + 1 WHERE id = `+f.ph(1), rowID(t, ds[0].ID)); err != nil {
		t.Fatal(err)
	}
	if err := src.Begin(context.Background(), ds[0]); !errors.Is(err, transport.ErrLeaseLost) {
		t.Fatalf("Begin of a taken-over row = %v, want ErrLeaseLost", err)
	}
	if err := src.Begin(context.Background(), ds[1]); err != nil || ds[1].Attempt != 1 {
		t.Fatalf("Begin = %v, attempt %d; want nil, 1", err, ds[1].Attempt)
	}
	// Settling the lost row is fenced too.
	if err := src.Complete(context.Background(), ds[0]); !errors.Is(err, transport.ErrLeaseLost) {
		t.Fatalf("Complete of a lost row = %v, want ErrLeaseLost", err)
	}
	if err := src.Complete(context.Background(), ds[1]); err != nil {
		t.Fatal(err)
	}
}

func testRelease(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 3)
	pub := f.newPub(t, db)
	PublishN(t, pub, "release", 10)
	src := f.newSource(t, db, "release")
	ds, err := src.Claim(context.Background(), 10)
	if err != nil || len(ds) != 10 {
		t.Fatalf("claim = %d, %v", len(ds), err)
	}
	before := src.Stats().Releases
	if err := src.Release(context.Background(), ds); err != nil {
		t.Fatal(err)
	}
	if got := src.Stats().Releases - before; got != 1 {
		t.Fatalf("release statements = %d, want 1", got)
	}
	if st := RowStates(t, db, src.Queue().Table); st[sqlqueue.StatePending] != 10 || len(st) != 1 {
		t.Fatalf("states after release = %v, want 10 pending", st)
	}
	var maxAttempts int
	if err := db.QueryRow(`SELECT max(attempts) FROM ` + src.Queue().Table).Scan(&maxAttempts); err != nil || maxAttempts != 0 {
		t.Fatalf("attempts after release = %d, %v; want 0", maxAttempts, err)
	}
}

// A subscriber closed with prefetched rows in its buffer releases every one
// of them: nothing stays fetched, no attempt is counted for them.
func testCloseReleasesPrefetched(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	PublishN(t, pub, "close_release", 50)
	c := f.subConfig(db)
	c.Pipeline.Concurrency = 1
	c.Pipeline.BufferSize = 20
	sub := f.newSubscriber(t, c)
	ch, err := sub.Subscribe(context.Background(), "close_release")
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch // the buffer fills behind this unacked message
	q := sub.Queue("close_release")
	waitFor(t, 10*time.Second, "prefetched rows", func() bool { return RowStates(t, db, q.Table)[sqlqueue.StateFetched] > 0 })
	first.Ack()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	st := RowStates(t, db, q.Table)
	if st[sqlqueue.StateFetched] != 0 || st[sqlqueue.StateProcessing] != 0 {
		t.Fatalf("after close: %v, want only pending rows", st)
	}
	var counted int
	if err := db.QueryRow(`SELECT count(*) FROM ` + q.Table + ` WHERE attempts > 0`).Scan(&counted); err != nil {
		t.Fatal(err)
	}
	// Between first.Ack and Close the next row may have been handed on (its
	// Begin counts an attempt, as it should); the ~19 prefetched rows behind
	// it must not have been counted.
	if counted > 1 {
		t.Fatalf("%d released rows had an attempt counted, want at most the one handed on after the ack", counted)
	}
}

func testDeadLetterRow(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 3)
	pub := f.newPub(t, db)
	ids := PublishN(t, pub, "dead", 1)
	src := f.newSource(t, db, "dead")
	ds, _ := src.Claim(context.Background(), 1)
	if len(ds) != 1 {
		t.Fatal("no row claimed")
	}
	if err := src.Begin(context.Background(), ds[0]); err != nil {
		t.Fatal(err)
	}
	if err := src.DeadLetter(context.Background(), ds[0], nil, "handler said no"); err != nil {
		t.Fatal(err)
	}
	var (
		uuid, headers, reason, queue string
		body                         []byte
		attempts                     int
	)
	err := db.QueryRow(`SELECT message_uuid, headers, body, attempts, reason, queue_table FROM `+f.errors).
		Scan(&uuid, &headers, &body, &attempts, &reason, &queue)
	if err != nil {
		t.Fatal(err)
	}
	if uuid != ids[0] || string(body) != "body-0" || attempts != 1 || reason != "handler said no" ||
		queue != src.Queue().Name || !strings.Contains(headers, `"i":"0"`) {
		t.Fatalf("error row = %s %s %q %d %q %s", uuid, headers, body, attempts, reason, queue)
	}
	if n := len(RowStates(t, db, src.Queue().Table)); n != 0 {
		t.Fatal("dead-lettered row still in the queue")
	}
	if err := src.DeadLetter(context.Background(), ds[0], nil, "again"); !errors.Is(err, transport.ErrLeaseLost) {
		t.Fatalf("second dead-letter = %v, want ErrLeaseLost", err)
	}
}

// A killed instance leaves fetched and processing rows; another instance's
// sweeper recovers them. The killed instance's sessions are terminated
// (Harness.Kill) and it is never closed before the check.
func testKilledInstance(t *testing.T, h Harness) {
	f := h.open(t)
	app := "berth_killed_" + watermill.NewShortUUID()
	dbA := f.env.Pool(t, 2, app)
	dbB := f.pool(t, 3)
	pub := f.newPub(t, dbB)
	ids := PublishN(t, pub, "killed", 6)

	srcA := f.openSource(t, sqlqueue.SubscriberConfig{
		DB: dbA, Tables: f.env.Tables, SweepInterval: -1, FetchTimeout: time.Second, Lease: time.Second,
	}, "killed")
	ds, err := srcA.Claim(context.Background(), 6)
	if err != nil || len(ds) != 6 {
		t.Fatalf("claim = %d, %v", len(ds), err)
	}
	for _, d := range ds[:2] { // two reach user code, four stay prefetched
		if err := srcA.Begin(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	if h.Kill != nil {
		h.Kill(t, dbB, app)
	} else {
		t.Log("Harness.Kill is nil: the instance is abandoned, not killed")
	}

	c := f.subConfig(dbB)
	c.FetchTimeout = time.Second
	c.Lease = time.Second
	c.SweepInterval = 200 * time.Millisecond
	subB := f.newSubscriber(t, c)
	ch, err := subB.Subscribe(context.Background(), "killed")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	timeout := time.After(30 * time.Second)
	for len(got) < 6 {
		select {
		case m := <-ch:
			got[m.UUID] = m.Metadata.Get(transport.MetadataAttempt)
			m.Ack()
		case <-timeout:
			t.Fatalf("recovered %d of 6", len(got))
		}
	}
	for _, id := range ids {
		if got[id] == "" {
			t.Fatalf("message %s never recovered", id)
		}
	}
	twice := 0
	for _, a := range got {
		if a == "2" {
			twice++
		}
	}
	if twice != 2 {
		t.Fatalf("attempts on recovery = %v; want the two processing rows at attempt 2, the rest at 1", got)
	}
	if s := subB.Stats(); s.Recovered < 6 {
		t.Fatalf("Stats.Recovered = %d, want ≥ 6", s.Recovered)
	}
	_ = srcA.Close(context.Background())
}

func testCompeting(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 10)
	pub := f.newPub(t, db)
	const n = 2000
	var ids []string
	for i := 0; i < n/100; i++ {
		ids = append(ids, PublishN(t, pub, "compete", 100)...)
	}
	var (
		mu    sync.Mutex
		seen  = map[string]int{}
		total int // deliveries, duplicates included
		wg    sync.WaitGroup
		subs  []*sqlqueue.Subscriber
	)
	all := make(chan struct{})
	for i := 0; i < 20; i++ {
		sub := f.newSubscriber(t, f.subConfig(db))
		subs = append(subs, sub)
		ch, err := sub.Subscribe(context.Background(), "compete")
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range ch {
				mu.Lock()
				seen[m.UUID]++
				total++
				if total == n {
					close(all)
				}
				mu.Unlock()
				m.Ack()
			}
		}()
	}
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("received %d of %d", len(seen), n)
	}
	for _, s := range subs {
		_ = s.Close()
	}
	wg.Wait()
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("message %s delivered %d times", id, seen[id])
		}
	}
}

func testCorruptHeaders(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	sub := f.newSubscriber(t, f.subConfig(db))
	if err := sub.SubscribeInitialize("corrupt"); err != nil {
		t.Fatal(err)
	}
	q := sub.Queue("corrupt")
	f.insert(t, db, q, RawRow{UUID: "bad", Headers: "{not json", Body: []byte("x")})
	good := PublishN(t, pub, "corrupt", 1)
	ch, err := sub.Subscribe(context.Background(), "corrupt")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		if m.UUID != good[0] {
			t.Fatalf("got %s, want the good message", m.UUID)
		}
		m.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not continue past the corrupt row")
	}
	var reason, headers string
	waitFor(t, 10*time.Second, "the error row", func() bool {
		return db.QueryRow(`SELECT reason, headers FROM `+f.errors+` WHERE message_uuid = `+f.ph(1), "bad").Scan(&reason, &headers) == nil
	})
	if !strings.Contains(reason, "headers") || headers != "{not json" {
		t.Fatalf("error row: reason %q headers %q", reason, headers)
	}
}

func testOversize(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 2)
	pub := f.newPub(t, db, func(c *sqlqueue.PublisherConfig) { c.MaxMessageSize = 100 })
	err := pub.Publish("big", message.NewMessage("x", make([]byte, 200)))
	if !errors.Is(err, transport.ErrMessageTooLarge) || !strings.Contains(err.Error(), "100") {
		t.Fatalf("err = %v, want ErrMessageTooLarge naming 100", err)
	}
}

func testBadURL(t *testing.T, h Harness) {
	if h.URL == nil {
		t.Skip("Harness.URL is nil: the dialect registers no URL scheme")
	}
	base := h.URL(t)
	open := func(kv ...string) error {
		s, err := transport.OpenSubscriber(context.Background(), withParams(t, base, kv...))
		if err == nil {
			_ = s.Close()
		}
		return err
	}
	err := open("concurrancy", "4")
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "concurrancy") {
		t.Fatalf("err = %v, want ErrInvalidConfig naming concurrancy", err)
	}
	err = open("lease", "soon")
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), `"lease"`) {
		t.Fatalf("err = %v, want ErrInvalidConfig naming lease", err)
	}
	// Every problem at once.
	err = open("lease", "soon", "bogus", "1")
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), `"lease"`) || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("err = %v, want ErrInvalidConfig naming lease and bogus", err)
	}
}

// skipSingleWriter skips t on a database that runs one write transaction
// at a time.
func skipSingleWriter(t *testing.T, h Harness) {
	t.Helper()
	if h.SingleWriter {
		t.Skip("Harness.SingleWriter: this case holds a write transaction open while others write, " +
			"which a database with one writer at a time serialises by design")
	}
}

// An insert that commits after a later one was consumed is still delivered:
// claims are state-based, not high-water marks.
func testCommitOrder(t *testing.T, h Harness) {
	skipSingleWriter(t, h)
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	src := f.newSource(t, db, "order")
	PublishN(t, pub, "order", 1) // creates the queue
	ds, _ := src.Claim(context.Background(), 1)
	for _, d := range ds {
		_ = src.Begin(context.Background(), d)
		_ = src.Complete(context.Background(), d)
	}

	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() }) // after a failure: no open transaction at the database's removal
	early := message.NewMessage("early", []byte("lower id"))
	if err := pub.WithTx(tx).Publish("order", early); err != nil {
		t.Fatal(err)
	}
	PublishN(t, pub, "order", 1) // higher id, commits first
	ds, err = src.Claim(context.Background(), 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim = %d, %v", len(ds), err)
	}
	_ = src.Begin(context.Background(), ds[0])
	_ = src.Complete(context.Background(), ds[0])
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	ds, err = src.Claim(context.Background(), 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("late-committed row: claim = %d, %v", len(ds), err)
	}
	m, err := src.Map(ds[0])
	if err != nil || m.UUID != "early" {
		t.Fatalf("got %v, %v; want the early message", m, err)
	}
}

// Subscribing to an existing queue takes no lock on its table: a
// transaction holding rows of it open (an outbox insert, a long statement)
// does not block a starting subscriber, and the subscriber's start does
// not stall the queue's traffic behind DDL (PostgreSQL: CREATE INDEX IF NOT
// EXISTS takes a SHARE lock even when the index exists).
func testSubscribeWhileWriting(t *testing.T, h Harness) {
	skipSingleWriter(t, h)
	f := h.open(t)
	db := f.pool(t, 3)
	pub := f.newPub(t, db)
	if err := pub.Publish("locks", message.NewMessage("1", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	q := sqlqueue.QueueFor(h.Dialect, f.env.Tables, "locks", "")
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	f.insert(t, tx, q, RawRow{UUID: "open", Headers: "{}", Body: []byte{}})

	subDB := f.pool(t, 3)
	sub, err := sqlqueue.NewSubscriber(h.Dialect, sqlqueue.SubscriberConfig{DB: subDB, Tables: f.env.Tables}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, "locks")
	if err != nil {
		t.Fatalf("subscribe while a transaction holds the queue table: %v", err)
	}
	select {
	case m := <-ch:
		m.Ack()
	case <-ctx.Done():
		t.Fatal("no message while a transaction holds the queue table")
	}
}
