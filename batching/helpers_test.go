package batching_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"go.uber.org/goleak"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/receiver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a transport.Clock whose timers fire only on Advance.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
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
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Waiters is the number of timers not yet fired.
func (c *fakeClock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
}

// eventually waits until cond holds, failing the test after 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// listener is the part of a Berth listener a batching stage sees: its
// pending counter, and how many permits its receiver had detached.
type listener struct {
	pending  *receiver.Pending
	mu       sync.Mutex
	detached int
}

func newListener() *listener {
	l := &listener{}
	l.pending = receiver.NewPending(nil)
	return l
}

func (l *listener) Detached() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.detached
}

// msg returns a message delivered by l, with a tracker in its context as
// the receiver attaches it.
func (l *listener) msg(payload string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(payload))
	ctx, _ := receiver.NewMessageContext(context.Background(), l.pending, onEnter(func() {
		l.mu.Lock()
		l.detached++
		l.mu.Unlock()
	}))
	m.SetContext(ctx)
	return m
}

// onEnter is a receiver.BatchHooks that calls itself when its message
// enters a batch.
type onEnter func()

func (f onEnter) EnteredBatch() { f() }
func (onEnter) LeftBatch()      {}

// localMsg is a message published in-process: no tracker.
func localMsg(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(payload))
}

// outcome reports whether m was acked, nacked, or neither.
func outcome(m *message.Message) string {
	select {
	case <-m.Acked():
		return "ack"
	default:
	}
	select {
	case <-m.Nacked():
		return "nack"
	default:
	}
	return "none"
}

// recorder is a BatchFunc that records batches and can be held.
type recorder struct {
	mu      sync.Mutex
	batches [][]string
	ctxErrs []error
	gate    chan struct{} // when non-nil, every call waits for a receive
	result  func(msgs []*message.Message) error
}

func (r *recorder) fn(ctx context.Context, msgs []*message.Message) error {
	payloads := make([]string, len(msgs))
	for i, m := range msgs {
		payloads[i] = string(m.Payload)
	}
	r.mu.Lock()
	r.batches = append(r.batches, payloads)
	r.ctxErrs = append(r.ctxErrs, ctx.Err())
	gate := r.gate
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if r.result != nil {
		return r.result(msgs)
	}
	return nil
}

func (r *recorder) Batches() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]string(nil), r.batches...)
}

func (r *recorder) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.batches)
}

// handleAsync calls h.Handle(m) in a goroutine, as the router does, and
// returns a channel with its result.
func handleAsync(h interface{ Handle(*message.Message) error }, m *message.Message) <-chan error {
	out := make(chan error, 1)
	go func() { out <- h.Handle(m) }()
	return out
}

// forms are the three ways to run a BatchFunc over a subscriber:
// a router with a Handler, Consume, and a router over a Subscriber.
var forms = []string{"router", "consume", "batches"}

// startForm runs fn over sub's topic in form and returns the function
// that stops it and closes sub.
func startForm(t *testing.T, form string, sub message.Subscriber, topic string, cfg batching.Config, fn batching.BatchFunc) (stop func()) {
	t.Helper()
	switch form {
	case "consume":
		ctx, cancel := context.WithCancel(context.Background())
		msgs, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		consumed := make(chan error, 1)
		go func() { consumed <- batching.Consume(ctx, msgs, cfg, fn) }()
		return func() {
			cancel()
			<-consumed
			_ = sub.Close()
		}
	case "router", "batches":
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		var (
			h  *batching.Handler
			bs *batching.Subscriber
		)
		if form == "router" {
			if h, err = batching.NewHandler(cfg, fn); err != nil {
				t.Fatal(err)
			}
			router.AddConsumerHandler("batch", topic, sub, h.Handle)
		} else {
			if bs, err = batching.NewSubscriber(sub, cfg); err != nil {
				t.Fatal(err)
			}
			router.AddConsumerHandler("batch", topic, bs, batching.HandlerFunc(fn))
		}
		runErr := make(chan error, 1)
		go func() { runErr <- router.Run(context.Background()) }()
		<-router.Running()
		return func() {
			_ = router.Close()
			<-runErr
			if h != nil {
				_ = h.Close(context.Background())
			}
			if bs != nil {
				_ = bs.Close() // the router started it; this waits for it
			}
			_ = sub.Close()
		}
	}
	t.Fatalf("unknown form %q", form)
	return nil
}

// gochannelRun is what the router tests over GoChannel share: the pub/sub,
// a router, a pending counter that remembers its peak, and every message
// delivered, each with a tracker on that counter as a Berth receiver
// attaches it.
type gochannelRun struct {
	pubSub    *gochannel.GoChannel
	router    *message.Router
	clock     *fakeClock
	runErr    chan error
	pending   *receiver.Pending
	peak      atomic.Int64
	mu        sync.Mutex
	delivered []*message.Message
}

func newGochannelRun(t *testing.T) *gochannelRun {
	t.Helper()
	logger := watermill.NopLogger{}
	r := &gochannelRun{pubSub: gochannel.NewGoChannel(gochannel.Config{}, logger), clock: newFakeClock(), runErr: make(chan error, 1)}
	r.pending = receiver.NewPending(func() {
		for n := int64(r.pending.Load()); ; {
			p := r.peak.Load()
			if n <= p || r.peak.CompareAndSwap(p, n) {
				return
			}
		}
	})
	var err error
	if r.router, err = message.NewRouter(message.RouterConfig{}, logger); err != nil {
		t.Fatal(err)
	}
	return r
}

// track attaches a tracker to m and records it, for a subscriber
// decorator. With detach, m's context no longer ends with GoChannel's
// subscription (see batchesRun).
func (r *gochannelRun) track(detach bool) func(m *message.Message) {
	return func(m *message.Message) {
		ctx := m.Context()
		if detach {
			ctx = context.WithoutCancel(ctx)
		}
		mctx, _ := receiver.NewMessageContext(ctx, r.pending, nil)
		m.SetContext(mctx)
		r.mu.Lock()
		r.delivered = append(r.delivered, m)
		r.mu.Unlock()
	}
}

// run starts the router and waits until it runs.
func (r *gochannelRun) run() {
	go func() { r.runErr <- r.router.Run(context.Background()) }()
	<-r.router.Running()
}

func (r *gochannelRun) publish(t *testing.T, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		if err := r.pubSub.Publish("topic", message.NewMessage(watermill.NewUUID(), []byte(p))); err != nil {
			t.Fatal(err)
		}
	}
}

// settled reports whether n deliveries happened and each was acked or nacked.
func (r *gochannelRun) settled(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.delivered) != n {
		return false
	}
	for _, m := range r.delivered {
		if outcome(m) == "none" {
			return false
		}
	}
	return true
}

// outcomes counts acks and nacks per payload.
func (r *gochannelRun) outcomes() (acks, nacks map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	acks, nacks = map[string]int{}, map[string]int{}
	for _, m := range r.delivered {
		switch outcome(m) {
		case "ack":
			acks[string(m.Payload)]++
		case "nack":
			nacks[string(m.Payload)]++
		}
	}
	return acks, nacks
}

// stopRouter closes the router and waits for Run to return.
func (r *gochannelRun) stopRouter(t *testing.T) {
	t.Helper()
	if err := r.router.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-r.runErr; err != nil {
		t.Fatal(err)
	}
}
