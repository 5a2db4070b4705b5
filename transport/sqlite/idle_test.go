package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// fakeClock is a manual clock: After registers a timer that Advance fires.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, fakeTimer{c.now.Add(d), ch})
	return ch
}

// waiting returns the number of timers not fired yet.
func (c *fakeClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Advance moves the clock by d and fires the timers due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	sort.Slice(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	c.timers = kept
}

// idleRig is one subscriber (parked, probing) and a publisher on another
// pool of the same file, as another process would be: its inserts wake
// nothing in the subscriber's pool, only the probe finds them.
type idleRig struct {
	clk     *fakeClock
	sub     *sqlqueue.Subscriber
	pub     *sqlqueue.Publisher
	subDB   *sql.DB
	msgs    <-chan *message.Message
	settled int // timers pending while everything waits
}

const (
	rigEmptyDelay = 100 * time.Millisecond
	rigProbeMax   = 800 * time.Millisecond
)

func newIdleRig(t *testing.T) *idleRig {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idle.db")
	clk := newFakeClock()
	d := sqlite.Dialect{Now: clk.Now}
	subDB, closer, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	// Another pool on the file, as another process would have (sqlite.Open
	// shares one pool per path).
	pubDB, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pubDB.Close() })
	sub, err := sqlqueue.NewSubscriber(d, sqlqueue.SubscriberConfig{
		DB: subDB, IdleProbeMax: rigProbeMax, WakeDebounce: -1, SweepInterval: -1,
		Pipeline: receiver.Config{Clock: clk, EmptyDelay: rigEmptyDelay},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	pub, err := sqlqueue.NewPublisher(d, sqlqueue.PublisherConfig{DB: pubDB}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	msgs, err := sub.Subscribe(context.Background(), "idle")
	if err != nil {
		t.Fatal(err)
	}
	r := &idleRig{clk: clk, sub: sub, pub: pub, subDB: subDB, msgs: msgs}
	// Settled: the receive loop waits out its empty delay and the prober
	// its interval.
	waitFor(t, "the first empty claim and probe", func() bool {
		return sub.Stats().EmptyClaims > 0 && clk.waiting() >= 2
	})
	r.settled = clk.waiting()
	return r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling a condition, not synchronising on time
	}
}

// step advances the fake clock by d and waits until the goroutines a
// timer woke have finished: the timers are re-armed and the subscriber's
// counters (claims, skipped claims, probes) have not moved for 20ms. The
// receive loop abandons its empty-delay timer when a wake-up ends the wait,
// so the timer count alone would let the clock run ahead of the loop.
func (r *idleRig) step(t *testing.T, d time.Duration) (*message.Message, bool) {
	r.clk.Advance(d)
	var (
		got    *message.Message
		last   int64 = -1
		stable time.Time
	)
	waitFor(t, "the loops to wait again", func() bool {
		select {
		case got = <-r.msgs:
			return true
		default:
		}
		st := r.sub.Stats()
		n := st.RoundTrips() + st.SkippedClaims
		if n != last {
			last, stable = n, time.Now()
			return false
		}
		return r.clk.waiting() >= r.settled && time.Since(stable) >= 20*time.Millisecond
	})
	return got, got != nil
}

// receive advances the fake clock in steps until a message arrives and
// returns the fake time it took.
func (r *idleRig) receive(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	const tick = 10 * time.Millisecond
	for elapsed := time.Duration(0); elapsed <= limit; {
		elapsed += tick
		if m, ok := r.step(t, tick); ok {
			m.Ack()
			return elapsed
		}
	}
	t.Fatalf("no message within %s of fake time", limit)
	return 0
}

// While nothing is published, the sources stop claiming and the pool's
// probe backs off to IdleProbeMax; a row published from another pool (no
// wake-up reaches this one) is claimed within IdleProbeMax.
func TestIdleProbeBoundsLatency(t *testing.T) {
	r := newIdleRig(t)
	before := r.sub.Stats()
	const idle = 10 * time.Second
	for range idle / (50 * time.Millisecond) {
		r.step(t, 50*time.Millisecond)
	}
	after := r.sub.Stats()
	if got := after.Claims - before.Claims; got != 0 {
		t.Errorf("claims while idle: %d, want 0 (parked)", got)
	}
	// Backed off: 0.1+0.2+0.4 s, then one probe per 0.8 s: about 15 in
	// 10 s, against 100 claims at the empty delay.
	if got := after.Probes - before.Probes; got < 5 || got > 20 {
		t.Errorf("probes in %s idle: %d, want about 15", idle, got)
	}
	if err := r.pub.Publish("idle", message.NewMessage("m1", nil)); err != nil {
		t.Fatal(err)
	}
	if got := r.receive(t, 3*rigProbeMax); got > rigProbeMax+100*time.Millisecond {
		t.Errorf("latency after idle: %s of fake time, want ≤ IdleProbeMax (%s) + 100ms", got, rigProbeMax)
	}
	if r.sub.Stats().ProbeHits == 0 {
		t.Error("the message was not found by the probe: the publisher's pool woke the subscriber's")
	}
}

// A delayed row published from another pool is seen by a probe, which
// looks again when it falls due: it is delivered on time, not at the next
// backed-off interval.
func TestIdleProbeDelayedOnTime(t *testing.T) {
	r := newIdleRig(t)
	for range 40 { // back off to IdleProbeMax
		r.step(t, 50*time.Millisecond)
	}
	const delay = 2030 * time.Millisecond
	m := message.NewMessage("late", nil)
	m.Metadata.Set(sqlqueue.MetadataDelay, delay.String())
	if err := r.pub.Publish("idle", m); err != nil {
		t.Fatal(err)
	}
	got := r.receive(t, 3*delay)
	if got < delay || got > delay+100*time.Millisecond {
		t.Errorf("delayed message after %s of fake time, want %s to %s", got, delay, delay+100*time.Millisecond)
	}
}

// An in-process publish wakes a parked source at once, without waiting
// for the probe.
func TestIdleLocalPublishWakes(t *testing.T) {
	r := newIdleRig(t)
	for range 40 {
		r.step(t, 50*time.Millisecond)
	}
	local := r.localPublisher(t)
	if err := local.Publish("idle", message.NewMessage("m1", nil)); err != nil {
		t.Fatal(err)
	}
	if got := r.receive(t, 3*rigProbeMax); got > 100*time.Millisecond {
		t.Errorf("latency of an in-process publish after idle: %s of fake time, want ≤ 100ms", got)
	}
}

// A delayed row published in-process to a parked source is claimed when
// it falls due: its wake-up finds it not due and the source parks again,
// and the pool's prober, told when the row falls due, probes then. Before,
// it was claimed at the probe the wake-up scheduled, one empty delay
// later (here 100ms; 1s by default).
func TestIdleLocalDelayedOnTime(t *testing.T) {
	r := newIdleRig(t)
	for range 40 {
		r.step(t, 50*time.Millisecond)
	}
	local := r.localPublisher(t)
	const delay = 30 * time.Millisecond
	m := message.NewMessage("soon", nil)
	m.Metadata.Set(sqlqueue.MetadataDelay, delay.String())
	if err := local.Publish("idle", m); err != nil {
		t.Fatal(err)
	}
	if got := r.receive(t, 3*rigProbeMax); got < delay || got > delay+30*time.Millisecond {
		t.Errorf("delayed in-process publish after idle: received after %s of fake time, want %s to %s (not at the probe one empty delay, %s, after the wake-up)",
			got, delay, delay+30*time.Millisecond, rigEmptyDelay)
	}
}

// localPublisher is a publisher on the subscriber's pool (this process's).
func (r *idleRig) localPublisher(t *testing.T) *sqlqueue.Publisher {
	t.Helper()
	local, err := sqlqueue.NewPublisher(sqlite.Dialect{Now: r.clk.Now}, sqlqueue.PublisherConfig{DB: r.subDB}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Close() })
	return local
}
