package sqlqueuetest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport/sqlqueue"
)

// receiveN subscribes sub to topic and acks n messages, failing t when
// they do not arrive within 30s, then closes sub (its acks settled); it
// returns how often each UUID arrived.
func receiveN(t *testing.T, sub *sqlqueue.Subscriber, topic string, n int) map[string]int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	timeout := time.After(30 * time.Second)
	for got := 0; got < n; got++ {
		select {
		case m := <-ch:
			seen[m.UUID]++
			m.Ack()
		case <-timeout:
			t.Fatalf("topic %s: received %d of %d", topic, got, n)
		}
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	return seen
}

// uuids reads the uuid of every row of table, with its count.
func uuids(t *testing.T, db *sql.DB, table string) map[string]int {
	t.Helper()
	rows, err := db.Query(`SELECT uuid FROM ` + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			t.Fatal(err)
		}
		m[u]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// exactly fails t unless got holds every id of want once, and nothing else.
func exactly(t *testing.T, what string, got map[string]int, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d distinct messages, want %d", what, len(got), len(want))
	}
	for _, id := range want {
		if got[id] != 1 {
			t.Errorf("%s: message %s seen %d times, want once", what, id, got[id])
		}
	}
}

// testParkedForLaterGroups: 30 messages published to a topic nobody
// subscribed to reach a consumer group subscribing later, then a second
// group subscribing later still, then a default reader; all are counted
// as parked.
func testParkedForLaterGroups(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	ids := PublishN(t, pub, "orders", 30)
	if p := pub.Stats().Parked; p != 30 {
		t.Fatalf("Stats.Parked = %d after 30 messages to a topic without subscription, want 30", p)
	}

	billing := f.subConfig(db)
	billing.ConsumerGroup = "billing"
	exactly(t, "group billing", receiveN(t, f.newSubscriber(t, billing), "orders", 30), ids)

	shipping := f.subConfig(db)
	shipping.ConsumerGroup = "shipping"
	exactly(t, "group shipping, registered later", receiveN(t, f.newSubscriber(t, shipping), "orders", 30), ids)

	// The parked rows are still there for the default reader.
	exactly(t, "default reader", receiveN(t, f.newSubscriber(t, f.subConfig(db)), "orders", 30), ids)

	// From now on nothing is parked: the topic has subscriptions.
	PublishN(t, pub, "orders", 1)
	if p := pub.Stats().Parked; p != 30 {
		t.Fatalf("Stats.Parked = %d after a publish to a subscribed topic, want 30", p)
	}
	for _, g := range []string{"billing", "shipping", ""} {
		q := sqlqueue.QueueFor(f.h.Dialect, f.env.Tables, "orders", g)
		if n := len(uuids(t, db, q.Table)); n != 1 {
			t.Errorf("queue of group %q holds %d rows after one more publish, want 1", g, n)
		}
	}
}

// stamps are the logical times of the start and end of an operation.
type stamps struct{ start, end int64 }

// testRegistrationRace: two consumer groups register, one through the
// publisher's pool and one through a second pool (another process), at
// random moments of a stream of 500 publishes with no subscriptions cache.
// Each message reaches exactly: every group when it was published before
// the first registration began (parked, then copied), a group when its
// publish began after that group's registration returned, and never a
// group whose registration began after the publish returned while another
// group was already registered. No message is parked once a group's
// registration returned.
func testRegistrationRace(t *testing.T, h Harness) {
	f := h.open(t)
	db, db2 := f.pool(t, 4), f.pool(t, 4)
	pub := f.newPub(t, db, func(c *sqlqueue.PublisherConfig) { c.SubscriptionsTTL = -1 })
	const n = 500
	var (
		clock atomic.Int64
		pubs  [n]stamps
		regs  [2]stamps
		ids   [n]string
		wg    sync.WaitGroup
	)
	groups := [2]string{"g1", "g2"}
	pools := [2]*sql.DB{db, db2}
	at := [2]int{rand.IntN(n - 100), 50 + rand.IntN(n-100)}
	start := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	for i := range groups {
		c := f.subConfig(pools[i])
		c.ConsumerGroup = groups[i]
		sub := f.newSubscriber(t, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start[i]
			regs[i].start = clock.Add(1)
			if err := sub.SubscribeInitialize("race"); err != nil {
				t.Error(err)
			}
			regs[i].end = clock.Add(1)
		}()
	}
	for k := range n {
		for i := range at {
			if at[i] == k {
				close(start[i])
			}
		}
		ids[k] = fmt.Sprintf("m-%03d", k)
		pubs[k].start = clock.Add(1)
		if err := pub.Publish("race", message.NewMessage(ids[k], []byte("x"))); err != nil {
			t.Fatal(err)
		}
		pubs[k].end = clock.Add(1)
	}
	wg.Wait()

	first := min(regs[0].start, regs[1].start)
	firstEnd := min(regs[0].end, regs[1].end)
	parked := uuids(t, db, sqlqueue.QueueFor(f.h.Dialect, f.env.Tables, "race", "").Table)
	got := [2]map[string]int{}
	for i, g := range groups {
		got[i] = uuids(t, db, sqlqueue.QueueFor(f.h.Dialect, f.env.Tables, "race", g).Table)
	}
	for k, id := range ids {
		p := pubs[k]
		if p.start > firstEnd && parked[id] > 0 {
			t.Errorf("message %d parked after a group registered", k)
		}
		if parked[id] > 1 {
			t.Errorf("message %d parked %d times", k, parked[id])
		}
		for i, g := range groups {
			c := got[i][id]
			switch {
			case c > 1:
				t.Errorf("message %d reached group %s %d times", k, g, c)
			case parked[id] == 1 && c != 1:
				t.Errorf("parked message %d missing in group %s", k, g)
			case p.end < first && c != 1:
				t.Errorf("message %d, published before any registration, missing in group %s", k, g)
			case p.start > regs[i].end && c != 1:
				t.Errorf("message %d, published after group %s registered, missing in it", k, g)
			case p.end < regs[i].start && p.start > firstEnd && c != 0:
				t.Errorf("message %d, published before group %s registered while another was, reached it", k, g)
			}
		}
		if parked[id]+got[0][id]+got[1][id] == 0 {
			t.Errorf("message %d lost", k)
		}
	}
	if t.Failed() {
		t.Logf("registrations %+v at publishes %v; parked %d", regs, at, len(parked))
	}
}

// testDeclaredGroups: a publisher's declared groups (PublisherConfig.Groups)
// receive what it publishes before any subscriber of theirs starts, and
// nothing is parked.
func testDeclaredGroups(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db, func(c *sqlqueue.PublisherConfig) {
		c.Groups = map[string][]string{"orders": {"billing"}, "*": {"audit"}}
	})
	ids := PublishN(t, pub, "orders", 10)
	other := PublishN(t, pub, "invoices", 5)
	if p := pub.Stats().Parked; p != 0 {
		t.Errorf("Stats.Parked = %d with declared groups, want 0", p)
	}
	for _, c := range []struct {
		topic, group string
		want         []string
	}{{"orders", "billing", ids}, {"orders", "audit", ids}, {"invoices", "audit", other}} {
		cfg := f.subConfig(db)
		cfg.ConsumerGroup = c.group
		exactly(t, c.topic+"/"+c.group, receiveN(t, f.newSubscriber(t, cfg), c.topic, len(c.want)), c.want)
	}
}

// testPruneParked: a consumer group's source prunes its topic's parked
// rows once they are older than ParkedRetention, and not before; a group
// registering afterwards receives none of them.
func testPruneParked(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	// A topic with a default reader has no parked rows: published first,
	// its rows are older than the others when those are pruned.
	PublishN(t, pub, "read", 3)
	f.openSource(t, f.subConfig(db), "read")
	PublishN(t, pub, "aging", 5)
	ctx := context.Background()

	keep := f.subConfig(db)
	keep.ConsumerGroup, keep.SweepInterval = "keep", -1
	if n, err := f.openSource(t, keep, "aging").PruneParked(ctx); err != nil || n != 0 {
		t.Fatalf("PruneParked with the default retention = %d, %v; want 0, nil", n, err)
	}
	forever := keep
	forever.ConsumerGroup, forever.ParkedRetention = "forever", -1
	if n, err := f.openSource(t, forever, "aging").PruneParked(ctx); err != nil || n != 0 {
		t.Fatalf("PruneParked with a negative retention = %d, %v; want 0, nil", n, err)
	}

	short := keep
	short.ConsumerGroup, short.ParkedRetention = "short", 50*time.Millisecond
	src := f.openSource(t, short, "aging")
	pruned := 0
	waitFor(t, 10*time.Second, "the parked rows pruned", func() bool {
		n, err := src.PruneParked(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pruned += n
		return pruned >= 5
	})
	if pruned != 5 {
		t.Fatalf("pruned %d parked rows, want 5", pruned)
	}
	if st := src.Stats(); st.Pruned != 5 {
		t.Errorf("Stats.Pruned = %d, want 5", st.Pruned)
	}
	dq := sqlqueue.QueueFor(f.h.Dialect, f.env.Tables, "aging", "")
	if n := len(uuids(t, db, dq.Table)); n != 0 {
		t.Errorf("default queue holds %d rows after the prune, want 0", n)
	}
	// The groups registered before kept their copies; a later one gets none.
	for _, g := range []string{"keep", "short"} {
		if n := len(uuids(t, db, sqlqueue.QueueFor(f.h.Dialect, f.env.Tables, "aging", g).Table)); n != 5 {
			t.Errorf("group %s holds %d rows, want its 5 copies", g, n)
		}
	}
	late := keep
	late.ConsumerGroup = "late"
	f.openSource(t, late, "aging")
	if n := len(uuids(t, db, sqlqueue.QueueFor(f.h.Dialect, f.env.Tables, "aging", "late").Table)); n != 0 {
		t.Errorf("group registered after the prune holds %d rows, want 0", n)
	}

	reader := short
	reader.ConsumerGroup = "g"
	if n, err := f.openSource(t, reader, "read").PruneParked(ctx); err != nil || n != 0 {
		t.Errorf("PruneParked of a topic with a default reader = %d, %v; want 0, nil", n, err)
	}
	if n := len(uuids(t, db, sqlqueue.QueueFor(f.h.Dialect, f.env.Tables, "read", "").Table)); n != 3 {
		t.Errorf("default queue of a topic with a default reader holds %d rows, want 3", n)
	}
}
