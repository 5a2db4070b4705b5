package sqlbench

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The limit loop, run by the harness like every contender, processes every
// message of a drain once.
func TestLimitDrainSmoke(t *testing.T) {
	h := newHarness(openTestPostgres(t))
	defer h.Close()
	for _, instances := range []int{1, 2} {
		rc := DrainConfigs(0.01)[0]
		rc.Strategy, rc.Instances, rc.Backlog = StrategyLimit, instances, 500
		r, err := h.Run(context.Background(), rc)
		if err != nil {
			t.Fatal(err)
		}
		if r.Messages != 500 || r.Metrics["duplicates"] != 0 || r.Metrics["backlog_left"] != 0 {
			t.Fatalf("limit ×%d processed %d (duplicates %v), want 500: %s", instances, r.Messages, r.Metrics["duplicates"], r.Notes)
		}
		if r.Metrics["receives_per_msg"] <= 0 {
			t.Fatalf("limit ×%d: no claims counted: %v", instances, r.Metrics)
		}
		t.Logf("limit ×%d: %v", instances, r.Metrics)
	}
}

// Competing limit instances hand out every row, delete it once
// acknowledged, return a nacked row to pending, and release the rows they
// claimed but had not handed out when they close: closed halfway through,
// the table holds exactly the rows not acknowledged, all pending, and a
// second round drains them.
func TestLimitAccountsEveryRow(t *testing.T) {
	const n = 2000
	db := openTestPostgres(t)
	defer db.close()
	ctx := context.Background()
	run, err := db.newRun(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = run.drop(ctx) }()
	pool, err := run.publisherPool()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := berthInitialize(pool, topic); err != nil {
		t.Fatal(err)
	}
	pub, err := berthPublisher(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(topic, newMessages(n)...); err != nil {
		t.Fatal(err)
	}
	table := postgres.Dialect{}.QuoteIdent(sqlqueue.QueueTableName(sqlqueue.DefaultTablePrefix, topic, ""))

	var (
		mu     sync.Mutex
		acked  = map[string]int{}
		nacked = map[string]bool{}
	)
	// round runs instances until stop holds, then closes them.
	round := func(instances int, stop func() bool) {
		var (
			wg    sync.WaitGroup
			subs  []*limitSubscriber
			pools []*sql.DB
		)
		for range instances {
			p, err := run.instancePool(4, NewCounter(nil))
			if err != nil {
				t.Fatal(err)
			}
			pools = append(pools, p)
			s := newLimitSubscriber(p, 16)
			subs = append(subs, s)
			ch, err := s.Subscribe(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for m := range ch {
					mu.Lock()
					// Every tenth message is nacked the first time.
					nack := !nacked[m.UUID] && len(acked)%10 == 0
					if nack {
						nacked[m.UUID] = true
					} else {
						acked[m.UUID]++
					}
					mu.Unlock()
					if nack {
						m.Nack()
					} else {
						m.Ack()
					}
				}
			}()
		}
		waitUntilT(t, stop)
		for _, s := range subs {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
		for _, p := range pools {
			_ = p.Close()
		}
	}
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}

	round(3, func() bool { return ackedCount() >= n/2 })
	var left, pending int
	if err := pool.QueryRow(`SELECT count(*), count(*) FILTER (WHERE state = 0) FROM `+table).Scan(&left, &pending); err != nil {
		t.Fatal(err)
	}
	if got := ackedCount(); left != n-got || pending != left {
		t.Fatalf("after closing: %d rows left (%d pending), want %d (n - acknowledged), all pending", left, pending, n-got)
	}

	round(2, func() bool { return ackedCount() == n })
	mu.Lock()
	defer mu.Unlock()
	for u, c := range acked {
		if c != 1 {
			t.Fatalf("message %s acknowledged %d times, want 1", u, c)
		}
	}
	if err := pool.QueryRow(`SELECT count(*) FROM ` + table).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 || len(nacked) == 0 {
		t.Fatalf("%d rows left in the queue (want 0), %d nacked (want some)", left, len(nacked))
	}
}

// waitUntilT polls cond until it holds, or fails t after a minute.
func waitUntilT(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising
	}
}
