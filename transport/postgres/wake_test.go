package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// BenchmarkWakeup measures what wake-ups cost: instances competing for one
// queue, idle between messages, each published on its own at a steady
// rate (one NOTIFY per Publish). It reports empty claims per message (the
// herd every NOTIFY wakes) and round trips per message, for instances with
// private pools (as separate processes) and for subscribers sharing one
// pool (goroutines of one process).
//
//	go test -run '^$' -bench Wakeup -benchtime 400x ./transport/postgres/
func BenchmarkWakeup(b *testing.B) {
	for _, shared := range []bool{false, true} {
		for _, debounce := range []time.Duration{-1, 0} {
			name := fmt.Sprintf("private_pools/debounce=%s", debounceName(debounce))
			if shared {
				name = fmt.Sprintf("one_pool/debounce=%s", debounceName(debounce))
			}
			b.Run(name, func(b *testing.B) { benchWakeup(b, 4, shared, debounce) })
		}
	}
}

func debounceName(d time.Duration) string {
	switch {
	case d < 0:
		return "off"
	case d == 0:
		return "default"
	}
	return d.String()
}

func benchWakeup(b *testing.B, instances int, shared bool, debounce time.Duration) {
	url := testenv.PostgresSchemaURL(b)
	pubDB, err := postgres.Open(url, 2)
	if err != nil {
		b.Fatal(err)
	}
	defer pubDB.Close()
	pub, err := postgres.NewPublisher(postgres.PublisherConfig{DB: pubDB}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()

	var sharedDB = pubDB
	if shared {
		if sharedDB, err = postgres.Open(url, 3); err != nil {
			b.Fatal(err)
		}
		defer sharedDB.Close()
	}
	const topic = "wake"
	var (
		subs     []*sqlqueue.Subscriber
		received atomic.Int64
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range instances {
		db := sharedDB
		if !shared {
			if db, err = postgres.Open(url, 2); err != nil {
				b.Fatal(err)
			}
			defer db.Close()
		}
		c := sqlqueue.SubscriberConfig{DB: db}
		c.Pipeline.Concurrency = 16
		setDebounce(&c, debounce)
		sub, err := postgres.NewSubscriber(c, nil)
		if err != nil {
			b.Fatal(err)
		}
		subs = append(subs, sub)
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range ch {
				received.Add(1)
				m.Ack()
			}
		}()
	}
	// Let every loop go idle (one empty claim each) before measuring.
	waitUntil(b, 10*time.Second, func() bool {
		for _, s := range subs {
			if s.Stats().EmptyClaims == 0 {
				return false
			}
		}
		return true
	})
	before := sumStats(subs)
	pubBefore := pub.Stats()
	b.ResetTimer()
	tick := time.NewTicker(5 * time.Millisecond) // 200 msg/s
	for i := 0; i < b.N; i++ {
		<-tick.C
		if err := pub.Publish(topic, message.NewMessage(fmt.Sprint(i), []byte("x"))); err != nil {
			b.Fatal(err)
		}
	}
	tick.Stop()
	waitUntil(b, 30*time.Second, func() bool { return received.Load() >= int64(b.N) })
	b.StopTimer()
	after := sumStats(subs)
	pubAfter := pub.Stats()
	n := float64(b.N)
	b.ReportMetric(float64(after.EmptyClaims-before.EmptyClaims)/n, "empty_claims/msg")
	b.ReportMetric(float64(after.Claims-before.Claims)/n, "claims/msg")
	b.ReportMetric(float64(after.RoundTrips()-before.RoundTrips())/n, "sub_round_trips/msg")
	b.ReportMetric(float64(pubAfter.RoundTrips()-pubBefore.RoundTrips())/n, "publish_round_trips/msg")
	cancel()
	for _, s := range subs {
		_ = s.Close()
	}
	wg.Wait()
}

func sumStats(subs []*sqlqueue.Subscriber) sqlqueue.Stats {
	var t sqlqueue.Stats
	for _, s := range subs {
		st := s.Stats()
		t.Claims += st.Claims
		t.EmptyClaims += st.EmptyClaims
		t.Begins += st.Begins
		t.Completes += st.Completes
		t.Sweeps += st.Sweeps
		t.Tx += st.Tx
		t.Other += st.Other
		t.Renews += st.Renews
		t.Releases += st.Releases
	}
	return t
}

func waitUntil(tb testing.TB, d time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising
	}
}

func setDebounce(c *sqlqueue.SubscriberConfig, d time.Duration) { c.WakeDebounce = d }

// Across pools (processes), one LISTEN connection per queue leads its
// wake-ups: the other pools ignore the queue's notifications and find rows
// by their poll. With polls switched off (an empty delay of an hour), only
// the leader's subscriber receives; when it goes away, the other takes the
// leadership (the database dropped the lock with the session) and its
// wake-ups deliver from then on — after several election passes, which
// interrupt the wait for notifications, so the connection survives those.
func TestWakeLeadershipAcrossPools(t *testing.T) {
	url := testenv.PostgresSchemaURL(t)
	pubDB, err := postgres.Open(url, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pubDB.Close()
	pub, err := postgres.NewPublisher(postgres.PublisherConfig{DB: pubDB}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	const topic = "lead"
	type instance struct {
		db       *sql.DB
		sub      *sqlqueue.Subscriber
		received atomic.Int64
		done     chan struct{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	instances := map[string]*instance{}
	for _, app := range []string{"berth-lead-a", "berth-lead-b"} {
		db, err := postgres.Open(url+"&application_name="+app, 3)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		// Only wake-ups deliver: no empty-delay poll, and no idle probe
		// (it would find the published rows on the follower's side too,
		// and wake its source).
		c := sqlqueue.SubscriberConfig{DB: db, IdleProbeMax: time.Hour}
		c.Pipeline.EmptyDelay = time.Hour
		sub, err := postgres.NewSubscriber(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		in := &instance{db: db, sub: sub, done: make(chan struct{})}
		instances[app] = in
		go func() {
			defer close(in.done)
			for m := range ch {
				in.received.Add(1)
				m.Ack()
			}
		}()
	}

	// Both LISTEN sessions have contended (their last statement is the
	// try-lock, or the LISTEN or UNLISTEN that followed it) and exactly one
	// holds the queue's lock.
	queueTable := instances["berth-lead-a"].sub.Queue(topic).Name
	leader := func() (holders []string) {
		rows, err := pubDB.Query(`
SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended(current_schema() || ':wake:' || $1, 0)`, queueTable)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var app string
			if err := rows.Scan(&app); err != nil {
				t.Fatal(err)
			}
			holders = append(holders, app)
		}
		return holders
	}
	contended := func() bool {
		var n int
		err := pubDB.QueryRow(`SELECT count(DISTINCT application_name) FROM pg_stat_activity
WHERE application_name LIKE 'berth-lead-%'
  AND (query LIKE '%pg_try_advisory_lock%' OR query LIKE 'LISTEN %' OR query LIKE 'UNLISTEN %')`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == 2
	}
	// ... and both sources have made their first claim (empty: nothing is
	// published yet), so neither claims at start after the publishing.
	waitUntil(t, 10*time.Second, func() bool {
		for _, in := range instances {
			if in.sub.Stats().EmptyClaims == 0 {
				return false
			}
		}
		return contended() && len(leader()) == 1
	})
	first := leader()[0]
	other := "berth-lead-a"
	if first == other {
		other = "berth-lead-b"
	}

	publish := func(n int) {
		for i := range n {
			if err := pub.Publish(topic, message.NewMessage(fmt.Sprint(i), []byte("x"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(10)
	// A leader whose source does not claim within leadStall of a wake-up
	// (a very busy machine) legitimately hands the lead on; only while the
	// lead stays put must the follower receive nothing.
	moved := false
	waitUntil(t, 20*time.Second, func() bool {
		if h := leader(); len(h) != 1 || h[0] != first {
			moved = true
		}
		return instances[first].received.Load()+instances[other].received.Load() == 10
	})
	if n := instances[other].received.Load(); n != 0 {
		if !moved {
			t.Fatalf("the follower %s received %d messages: it answered the leader's wake-ups", other, n)
		}
		t.Logf("the lead moved during the run (slow machine); the follower received %d", n)
	}

	// The leader goes away; the follower takes over within a contend
	// interval and its wake-ups deliver.
	if err := instances[first].sub.Close(); err != nil {
		t.Fatal(err)
	}
	<-instances[first].done
	waitUntil(t, 15*time.Second, func() bool { h := leader(); return len(h) == 1 && h[0] == other })
	publish(10)
	waitUntil(t, 10*time.Second, func() bool { return instances[other].received.Load() == 10 })
}
