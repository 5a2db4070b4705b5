package batching_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// TestBackPressureOverPostgres is TestBackPressureOverMem over a real
// transport: a router (or Consume) with a batch handler far slower than
// arrivals over PostgreSQL queue tables. The listener latches too busy with
// its QueueCount bounded by MaxQueue plus one wave, stops claiming (the rest
// stays pending in the table), and resumes as batches complete. Every
// message is handled exactly once (ledger), and the counts, the table and
// the error table end empty.
func TestBackPressureOverPostgres(t *testing.T) {
	for _, form := range forms {
		t.Run(form, func(t *testing.T) { testBackPressureOverPostgres(t, form) })
	}
}

func testBackPressureOverPostgres(t *testing.T, form string) {
	const (
		total        = 400
		maxQueue     = 40
		restartQueue = 20
		waveCap      = 8
		concurrency  = 4
		checkEvery   = 10 * time.Millisecond
	)
	db, err := postgres.Open(testenv.PostgresSchemaURL(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })

	topic := testenv.UniqueName("batching")
	pub, err := postgres.NewPublisher(postgres.PublisherConfig{DB: db}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close() }()
	sc := sqlqueue.SubscriberConfig{DB: db}
	sc.Pipeline = receiver.Config{
		Concurrency:   concurrency,
		MaxQueue:      maxQueue,
		RestartQueue:  restartQueue,
		CheckInterval: checkEvery,
		MaxAttempts:   -1,
		DrainTimeout:  5 * time.Second,
		WaveCap:       waveCap, EmptyDelay: 10 * time.Millisecond,
	}
	sub, err := postgres.NewSubscriber(sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	table := sub.Queue(topic).Table

	// Everything is in the table before the listener starts: arrivals are
	// as fast as the listener can claim.
	msgs := make([]*message.Message, total)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}

	// The batch handler waits for a token per batch: until the test hands
	// them out it is infinitely slower than arrivals.
	tokens := make(chan struct{})
	var (
		mu      sync.Mutex
		handled = map[string]int{}
		allDone = make(chan struct{})
	)
	fn := func(ctx context.Context, msgs []*message.Message) error {
		select {
		case <-tokens:
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			handled[string(m.Payload)]++
		}
		if len(handled) == total {
			close(allDone)
		}
		return nil
	}
	cfg := batching.Config{MaxSize: 10, MaxWait: 20 * time.Millisecond}

	stop := startForm(t, form, sub, topic, cfg, fn)
	defer func() {
		close(tokens) // let whatever is still blocked finish
		stop()
	}()

	var l *receiver.Listener
	eventually(t, "the listener", func() bool {
		if ls := sub.Listeners(); len(ls) == 1 {
			l = ls[0]
			return true
		}
		return false
	})

	// Phase 1: nothing completes. The listener must latch.
	eventually(t, "the listener to latch too busy", func() bool {
		return l.State().Status == transport.StatusTooBusy
	})
	st := l.State()
	t.Logf("latched: %+v", st)
	if !st.Latched || st.QueueCount <= restartQueue || st.QueueCount > maxQueue+waveCap {
		t.Errorf("QueueCount = %d latched=%v, want latched in (%d, %d]", st.QueueCount, st.Latched, restartQueue, maxQueue+waveCap)
	}
	if st.BatchPending == 0 {
		t.Errorf("BatchPending = 0 while the batcher holds members")
	}
	// While latched the listener claims nothing more: the table keeps the
	// rest pending. Watch for 30 check intervals; a claim that was already
	// running when the latch tripped may still land, one at most.
	claims := sub.Stats().Claims
	pending := pendingRows(t, db, table)
	if pending < total-maxQueue-waveCap {
		t.Errorf("%d rows pending in the table at the latch, want ≥ %d", pending, total-maxQueue-waveCap)
	}
	for deadline := time.Now().Add(30 * checkEvery); time.Now().Before(deadline); {
		if s := l.State(); s.Status != transport.StatusTooBusy {
			t.Fatalf("listener left too busy with no batch completed: %+v", s)
		}
		if n := sub.Stats().Claims; n > claims+1 {
			t.Fatalf("claims went from %d to %d while latched", claims, n)
		}
		time.Sleep(checkEvery) // an observation window, not synchronisation
	}
	if now := pendingRows(t, db, table); now < pending-waveCap {
		t.Errorf("pending rows went from %d to %d while latched", pending, now)
	}

	// Phase 2: batches complete one at a time; the listener resumes and
	// latches again as it needs to, until everything is handled.
	resumed := false
	for done := false; !done; {
		select {
		case tokens <- struct{}{}:
		case <-allDone:
			done = true
		case <-time.After(10 * time.Second):
			t.Fatalf("no batch asked for a token; state %+v, %d rows pending", l.State(), pendingRows(t, db, table))
		}
		s := l.State()
		// A snapshot may count a member entering a batch twice (pending
		// in the batch a moment before the receiver frees its permit):
		// up to one per concurrency permit on top of MaxQueue + one wave.
		if s.QueueCount > maxQueue+waveCap+concurrency {
			t.Fatalf("QueueCount %d over MaxQueue + one wave + the permits", s.QueueCount)
		}
		if s.Status == transport.StatusAccepting {
			resumed = true
		}
	}
	eventually(t, "counts and the table back to zero", func() bool {
		s := l.State()
		return s.QueueCount == 0 && s.BatchPending == 0 && s.Status == transport.StatusAccepting &&
			tableRows(t, db, table) == 0
	})
	if resumed {
		t.Log("observed the listener accepting again between batches")
	} else {
		t.Log("never observed accepting between batches (the drain proves resumption anyway)")
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range total {
		if n := handled[fmt.Sprint(i)]; n != 1 {
			t.Errorf("message %d handled %d times, want 1", i, n)
		}
	}
	if n := tableRows(t, db, sub.Queue(topic).Errors); n != 0 {
		t.Errorf("%d dead letters", n)
	}
	t.Logf("statements: %+v", sub.Stats())
}

func pendingRows(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM `+table+` WHERE state = $1`, sqlqueue.StatePending).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func tableRows(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
