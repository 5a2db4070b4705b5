package receiver_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/goleak"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource is a scriptable source for unit tests of the loop: it hands
// out numbered deliveries from a counter and records every Claim.
type fakeSource struct {
	mu        sync.Mutex
	available int
	next      int
	maxClaim  int
	claims    []int // max asked per Claim
	errs      []error
	completed int
	released  int
	retried   int
}

func (s *fakeSource) Claim(ctx context.Context, max int) ([]*transport.Delivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims = append(s.claims, max)
	if len(s.errs) > 0 {
		err := s.errs[0]
		s.errs = s.errs[1:]
		return nil, err
	}
	n := min(max, s.available)
	s.available -= n
	ds := make([]*transport.Delivery, n)
	for i := range ds {
		s.next++
		ds[i] = &transport.Delivery{ID: strconv.Itoa(s.next), Attempt: 1, Raw: []byte("x")}
	}
	return ds, nil
}

func (s *fakeSource) Map(d *transport.Delivery) (*message.Message, error) {
	return message.NewMessage(d.ID, d.Raw.([]byte)), nil
}
func (s *fakeSource) Begin(context.Context, *transport.Delivery) error { return nil }
func (s *fakeSource) Complete(context.Context, *transport.Delivery) error {
	s.mu.Lock()
	s.completed++
	s.mu.Unlock()
	return nil
}
func (s *fakeSource) Retry(context.Context, *transport.Delivery, time.Duration, string) error {
	s.mu.Lock()
	s.retried++
	s.available++
	s.mu.Unlock()
	return nil
}
func (s *fakeSource) Release(_ context.Context, ds []*transport.Delivery) error {
	s.mu.Lock()
	s.released += len(ds)
	s.available += len(ds)
	s.mu.Unlock()
	return nil
}
func (s *fakeSource) DeadLetter(context.Context, *transport.Delivery, *message.Message, string) error {
	return nil
}
func (s *fakeSource) Close(context.Context) error { return nil }

func (s *fakeSource) claimLog() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.claims...)
}

type sizedSource struct{ *fakeSource }

func (s sizedSource) MaxClaim() int { return s.maxClaim }

func newListener(t *testing.T, src transport.Source, p receiver.Config) *receiver.Listener {
	t.Helper()
	if p.EmptyDelay == 0 {
		p.EmptyDelay = 5 * time.Millisecond
	}
	if p.DrainTimeout == 0 {
		p.DrainTimeout = 200 * time.Millisecond
	}
	l, err := receiver.NewListener(receiver.ListenerConfig{Name: "t", Source: src, Pipeline: p})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}

// The loop claims one probe after idle, then doubles while claims come back
// full, and never asks for more than the free buffer.
func TestListenerRampsAndRespectsFreeSpace(t *testing.T) {
	src := &fakeSource{available: 1000}
	l := newListener(t, src, receiver.Config{Concurrency: 1, BufferSize: 40})
	// Nobody reads: the buffer fills to 40, one more is held by the permit.
	eventually(t, "buffer full", func() bool { return l.State().Buffered == 40 })
	log := src.claimLog()
	want := []int{1, 2, 4, 8, 16}
	for i, w := range want {
		if log[i] != w {
			t.Fatalf("claims = %v, want prefix %v", log, want)
		}
	}
	total := 0
	for _, c := range log {
		total += c
	}
	if total > 41 {
		t.Fatalf("claimed %d rows for a 40-slot buffer + 1 permit: %v", total, log)
	}
}

// Sources with fixed-size claims (SQS) get a wave of concurrent claims,
// each asking for a full MaxClaim; no partial request is made while the
// buffer still holds a full request's worth.
func TestListenerWaveOfSizedClaims(t *testing.T) {
	src := sizedSource{&fakeSource{available: 1000, maxClaim: 10}}
	l := newListener(t, src, receiver.Config{Concurrency: 1, BufferSize: 100})
	eventually(t, "buffer nearly full", func() bool { return l.State().Buffered >= 90 })
	for _, c := range src.claimLog() {
		if c != 10 {
			t.Fatalf("claim asked for %d, want full requests of 10: %v", c, src.claimLog())
		}
	}
}

// directSource claims straight into processing (transport.DirectClaimer)
// and logs max and direct of every call.
type directSource struct {
	*fakeSource
	dmu    sync.Mutex
	direct [][2]int // {max, direct} per ClaimDirect
}

func (s *directSource) ClaimDirect(ctx context.Context, max, direct int) ([]*transport.Delivery, error) {
	s.dmu.Lock()
	s.direct = append(s.direct, [2]int{max, direct})
	s.dmu.Unlock()
	ds, err := s.Claim(ctx, max)
	for i := range ds {
		ds[i].Started = i < direct
	}
	return ds, err
}

func (s *directSource) directLog() [][2]int {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	return append([][2]int(nil), s.direct...)
}

// A wave at its cap whose rows all have free permits grows by the permits
// still free, up to twice the cap, and every row beyond the cap is claimed
// started: none waits in the buffer. Once the permits are taken, claims
// stay within the cap and the buffer gets the rest.
func TestListenerDirectClaimGrowsOnlyIntoFreePermits(t *testing.T) {
	src := &directSource{fakeSource: &fakeSource{available: 1000}}
	l := newListener(t, src, receiver.Config{Concurrency: 20, BufferSize: 8, WaveCap: 4})
	// Nobody reads: 20 deliveries hold the permits, 8 wait in the buffer.
	eventually(t, "permits taken and buffer full", func() bool {
		s := l.State()
		return s.InFlight == 20 && s.Buffered == 8
	})
	log := src.directLog()
	grew, started := false, 0
	for _, c := range log {
		max, direct := c[0], c[1]
		if max > 8 {
			t.Fatalf("a claim asked for %d rows, over twice the wave cap of 4: %v", max, log)
		}
		if max > 4 {
			grew = true
			if direct != max {
				t.Fatalf("a claim beyond the cap asked for %d rows with only %d started: %v", max, direct, log)
			}
		}
		started += direct
	}
	if !grew {
		t.Fatalf("no claim grew beyond the wave cap with 20 free permits: %v", log)
	}
	if started > 20 {
		t.Fatalf("%d rows claimed started for 20 permits: %v", started, log)
	}
	if want := []int{1, 2, 8}; len(log) < 3 || log[0][0] != want[0] || log[1][0] != want[1] || log[2][0] != want[2] {
		t.Fatalf("claims = %v, want the ramp 1, 2, then 4 grown to 8", log)
	}
}

// Receive errors back off, are counted, and a missing queue is reported
// distinctly; a success resets the count.
func TestListenerReceiveErrors(t *testing.T) {
	missing := errors.Join(transport.ErrQueueNotFound, errors.New("no such table"))
	src := &fakeSource{errs: []error{errors.New("boom"), missing, missing}}
	l := newListener(t, src, receiver.Config{ErrorBackoff: time.Millisecond, MaxErrorDelay: 50 * time.Millisecond})
	eventually(t, "queue missing reported", func() bool {
		s := l.State()
		return s.QueueMissing && s.ConsecutiveFailures >= 2
	})
	eventually(t, "recovered", func() bool {
		s := l.State()
		return s.ConsecutiveFailures == 0 && !s.QueueMissing && !s.LastReceive.IsZero() && s.Status == transport.StatusAccepting
	})
}

// Messages held in batches count toward QueueCount; above MaxQueue the
// listener latches too busy and stops fetching, and it resumes at the
// restart threshold.
func TestListenerBackPressureSeesBatching(t *testing.T) {
	src := &fakeSource{available: 500}
	l := newListener(t, src, receiver.Config{Concurrency: 4, BufferSize: 4, MaxQueue: 20, RestartQueue: 10})
	var held []func()
	var msgs []*message.Message
	for len(msgs) < 30 {
		select {
		case m := <-l.Messages():
			held = append(held, receiver.EnterBatch(m)) // frees the permit
			msgs = append(msgs, m)
		case <-time.After(10 * time.Millisecond):
		}
		if l.State().Status == transport.StatusTooBusy {
			break
		}
	}
	eventually(t, "latched too busy", func() bool { return l.State().Status == transport.StatusTooBusy })
	s := l.State()
	if s.BatchPending != len(msgs) || s.QueueCount != s.Buffered+s.InFlight+s.BatchPending {
		t.Fatalf("state %+v with %d batched", s, len(msgs))
	}
	// Stopped fetching: overshoot bounded by one wave (≤ buffer).
	if s.QueueCount > 20+4+4 {
		t.Fatalf("QueueCount %d overshoots MaxQueue 20 by more than a wave", s.QueueCount)
	}
	// Settle batches: ack and settle (twice: the second is a no-op).
	for i, m := range msgs {
		m.Ack()
		held[i]()
		held[i]()
	}
	eventually(t, "accepting again", func() bool { return l.State().Status == transport.StatusAccepting })
	if p := l.Pending().Load(); p != 0 {
		t.Fatalf("pending = %d after settling, want 0", p)
	}
	// Drain the rest so the listener empties.
	go func() {
		for m := range l.Messages() {
			m.Ack()
		}
	}()
	eventually(t, "all completed", func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.completed == 500
	})
}

// A message published in-process (no tracker) never counts.
func TestEnterBatchIgnoresLocalMessages(t *testing.T) {
	m := message.NewMessage("local", nil)
	settle := receiver.EnterBatch(m)
	settle()
}

// Pending settles exactly once per member and clamps at zero.
func TestPendingSettleOnceAndClamp(t *testing.T) {
	p := receiver.NewPending(nil)
	mk := func() *message.Message {
		m := message.NewMessage("m", nil)
		ctx, _ := receiver.NewMessageContext(context.Background(), p, nil)
		m.SetContext(ctx)
		return m
	}
	a, b := mk(), mk()
	sa, sb := receiver.EnterBatch(a), receiver.EnterBatch(b)
	if again := receiver.EnterBatch(a); p.Load() != 2 {
		t.Fatalf("pending = %d, want 2", p.Load())
	} else {
		again() // no-op: a already entered
	}
	sa()
	sa()
	if p.Load() != 1 {
		t.Fatalf("pending = %d after double settle, want 1", p.Load())
	}
	sb()
	if p.Load() != 0 {
		t.Fatalf("pending = %d, want 0", p.Load())
	}
}

// Start after a fault rebuilds the receiver instead of re-attaching to the
// dead one.
func TestStartRebuildsFaultedReceiver(t *testing.T) {
	src := &fakeSource{}
	var built int
	var mu sync.Mutex
	var recvs []*faultable
	factory := func(newStage func() (receiver.Pipe, error)) (receiver.Pipe, error) {
		r, err := newStage()
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		built++
		f := &faultable{Pipe: r, done: make(chan struct{})}
		recvs = append(recvs, f)
		return f, nil
	}
	// A long check interval: only Start may rebuild in this test.
	l, err := receiver.NewListenerWith(receiver.ListenerConfig{Name: "t", Source: src,
		Pipeline: receiver.Config{CheckInterval: time.Hour, DrainTimeout: 100 * time.Millisecond}}, factory)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	recvs[0].fault.Store(&transport.Fault{Stage: "test", Cause: errors.New("x"), At: time.Now()})
	mu.Unlock()
	if !l.HasFaulted() || l.Status() != transport.StatusFaulted {
		t.Fatalf("HasFaulted = %v, status %s", l.HasFaulted(), l.Status())
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if built != 2 || l.HasFaulted() || l.State().Rebuilds != 1 {
		t.Fatalf("built %d receivers, faulted %v, rebuilds %d", built, l.HasFaulted(), l.State().Rebuilds)
	}
	select {
	case <-recvs[0].Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the faulted receiver was not disposed of")
	}
}

type faultable struct {
	receiver.Pipe
	done  chan struct{} // closed by Close
	once  sync.Once
	fault atomicFault
}

type atomicFault struct {
	mu sync.Mutex
	f  *transport.Fault
}

func (a *atomicFault) Store(f *transport.Fault) { a.mu.Lock(); a.f = f; a.mu.Unlock() }
func (a *atomicFault) Load() *transport.Fault   { a.mu.Lock(); defer a.mu.Unlock(); return a.f }

// Close closes the stage, then Done.
func (f *faultable) Close(ctx context.Context) error {
	err := f.Pipe.Close(ctx)
	f.once.Do(func() { close(f.done) })
	return err
}

// Done is closed when Close has finished.
func (f *faultable) Done() <-chan struct{} { return f.done }

func (f *faultable) Fault() *transport.Fault {
	if x := f.fault.Load(); x != nil {
		return x
	}
	return f.Pipe.Fault()
}

// zombie accepts deliveries and never hands them on: the receive loop
// keeps claiming while nothing reaches the handler.
type zombie struct {
	mu   sync.Mutex
	held []*transport.Delivery
	done chan struct{}
	once sync.Once
	src  transport.Source
}

func (z *zombie) Push(ds []*transport.Delivery) {
	z.mu.Lock()
	z.held = append(z.held, ds...)
	z.mu.Unlock()
}
func (z *zombie) Reserve(int) int { return 0 }
func (z *zombie) PushReserved(ds []*transport.Delivery, _ int) {
	z.Push(ds)
}
func (z *zombie) Free() int               { z.mu.Lock(); defer z.mu.Unlock(); return max(0, 10-len(z.held)) }
func (z *zombie) Buffered() int           { z.mu.Lock(); defer z.mu.Unlock(); return len(z.held) }
func (z *zombie) InFlight() int           { return 0 }
func (z *zombie) Counts() (int, int)      { return z.Buffered(), 0 }
func (z *zombie) Dispatched() int64       { return 0 }
func (z *zombie) Fault() *transport.Fault { return nil }
func (z *zombie) Done() <-chan struct{}   { return z.done }
func (z *zombie) ReleaseBuffered(ctx context.Context) error {
	z.mu.Lock()
	ds := z.held
	z.held = nil
	z.mu.Unlock()
	return z.src.Release(ctx, ds)
}
func (z *zombie) Close(ctx context.Context) error {
	z.once.Do(func() { _ = z.ReleaseBuffered(ctx); close(z.done) })
	return nil
}

// The watchdog rebuilds a receiver that accepts deliveries but drops them
// on the floor (never dispatches), and what it held goes back to the broker.
func TestWatchdogRebuildsZombieReceiver(t *testing.T) {
	src := &fakeSource{available: 5}
	var built int
	var mu sync.Mutex
	factory := func(newStage func() (receiver.Pipe, error)) (receiver.Pipe, error) {
		mu.Lock()
		defer mu.Unlock()
		built++
		if built == 1 {
			return &zombie{done: make(chan struct{}), src: src}, nil
		}
		return newStage()
	}
	l, err := receiver.NewListenerWith(receiver.ListenerConfig{Name: "t", Source: src,
		Pipeline: receiver.Config{CheckInterval: 10 * time.Millisecond, DrainTimeout: 100 * time.Millisecond}}, factory)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < 5 {
		select {
		case m := <-l.Messages():
			got[m.UUID] = true
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("zombie not replaced: state %+v", l.State())
		}
	}
	s := l.State()
	if s.Rebuilds < 1 || s.Fault == "" {
		t.Fatalf("state %+v, want a recorded stall fault and a rebuild", s)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.released == 0 {
		t.Fatal("the zombie's deliveries were not released")
	}
}

// bindingObserver records what ForListener is given; its bound observer
// records Received and Settled events.
type bindingObserver struct {
	transport.NopObserver
	mu       sync.Mutex
	names    []string
	dests    []transport.Destination
	received int // deliveries reported by Received
	settled  []transport.SettleOp
	panics   bool
}

func (o *bindingObserver) ForListener(name string, d transport.Destination) transport.Observer {
	if o.panics {
		panic("ForListener")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.names = append(o.names, name)
	o.dests = append(o.dests, d)
	return boundObserver{o}
}

type boundObserver struct{ o *bindingObserver }

func (boundObserver) WaveDone(string, int, int, int, error) {}
func (boundObserver) Delivering(ctx context.Context, _ string, _ *message.Message) (context.Context, func(transport.Outcome)) {
	return ctx, nil
}
func (boundObserver) DeadLettered(string, *message.Message, string) {}
func (boundObserver) Faulted(string, *transport.Fault)              {}
func (boundObserver) Rebuilt(string)                                {}
func (b boundObserver) Received(_ string, _ time.Time, claimed int, _ error) {
	b.o.mu.Lock()
	b.o.received += claimed
	b.o.mu.Unlock()
}
func (b boundObserver) Settled(_ string, op transport.SettleOp, _ *message.Message, _ int, _ time.Time, _ error) {
	b.o.mu.Lock()
	b.o.settled = append(b.o.settled, op)
	b.o.mu.Unlock()
}

// A ListenerObserver is bound to each listener with the Destination the
// subscriber describes, and the bound observer gets the listener's and its
// receiver's events (claims and settlements among them).
func TestSubscriberBindsObserver(t *testing.T) {
	src := &fakeSource{available: 1}
	obs := &bindingObserver{}
	p := receiver.Config{Observer: obs, DrainTimeout: time.Second}
	p.EmptyDelay = 5 * time.Millisecond
	sub, err := receiver.NewSubscriber(func(context.Context, string) (transport.Source, error) { return src, nil },
		receiver.SubscriberConfig{Pipeline: p, System: "test.system", ConsumerGroup: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	if got := sub.MessagingSystem(); got != "test.system" {
		t.Errorf("MessagingSystem() = %q, want test.system", got)
	}
	ch, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		m.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	want := transport.Destination{System: "test.system", Name: "orders", ConsumerGroup: "billing"}
	eventually(t, "the ack reported", func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return len(obs.settled) == 1
	})
	obs.mu.Lock()
	if len(obs.names) != 1 || obs.names[0] != "orders/billing" || obs.dests[0] != want {
		t.Errorf("ForListener(%v, %+v), want (orders/billing, %+v)", obs.names, obs.dests, want)
	}
	if obs.received != 1 || obs.settled[0] != transport.SettleAck {
		t.Errorf("bound observer saw %d received, settlements %v; want 1 and [ack]", obs.received, obs.settled)
	}
	obs.mu.Unlock()
	states := sub.ListenerStates()
	if len(states) != 1 || states[0].Destination != want || states[0].Name != "orders/billing" {
		t.Errorf("ListenerStates = %+v, want one listener orders/billing consuming %+v", states, want)
	}
}

// A ForListener that panics leaves the observer itself in place.
func TestListenerObserverPanicIgnored(t *testing.T) {
	obs := &bindingObserver{panics: true}
	l := newListener(t, &fakeSource{}, receiver.Config{Observer: obs})
	if d := l.Destination(); d.Name != "t" {
		t.Errorf("Destination().Name = %q, want the listener name t", d.Name)
	}
}

// kickSource is a fakeSource that is a transport.Kicker.
type kickSource struct {
	*fakeSource
	wake, kick chan struct{}
}

func (s kickSource) Wake() <-chan struct{} { return s.wake }
func (s kickSource) Kick() <-chan struct{} { return s.kick }

// frozenClock never advances: a wait on it ends only on a channel.
type frozenClock struct{ now time.Time }

func (c frozenClock) Now() time.Time                     { return c.now }
func (frozenClock) After(time.Duration) <-chan time.Time { return nil }

// A kick ends the empty delay at once, with no hold-off: on a clock that
// never advances, the loop sitting in an empty delay claims again only
// because of the kick (a wake-up would wait for its jittered hold-off on
// that clock).
func TestListenerClaimsAtOnceOnKick(t *testing.T) {
	src := kickSource{fakeSource: &fakeSource{}, wake: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
	newListener(t, src, receiver.Config{EmptyDelay: time.Hour, Clock: frozenClock{time.Unix(1e9, 0)}})
	eventually(t, "the first, empty claim", func() bool { return len(src.claimLog()) >= 1 })
	src.mu.Lock()
	src.available = 1
	src.mu.Unlock()
	src.kick <- struct{}{}
	eventually(t, "a claim after the kick", func() bool { return len(src.claimLog()) >= 2 })
}

// gatedSource holds every Claim until its gate opens, and says when one
// is waiting there.
type gatedSource struct {
	*fakeSource
	waiting chan struct{} // a Claim is held (cap 1)
	gate    chan struct{} // closed: Claims go on
}

func (s gatedSource) Claim(ctx context.Context, max int) ([]*transport.Delivery, error) {
	select {
	case s.waiting <- struct{}{}:
	default:
	}
	select {
	case <-s.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.fakeSource.Claim(ctx, max)
}

type gatedDirect struct{ gatedSource }

func (s gatedDirect) ClaimDirect(ctx context.Context, max, direct int) ([]*transport.Delivery, error) {
	ds, err := s.Claim(ctx, max)
	for i := range ds {
		ds[i].Started = i < direct
	}
	return ds, err
}

// A claim in flight when the listener pauses returns its rows after Pause
// released the buffer: they go back to the source, never to user code, and
// the listener holds nothing. Before, they were buffered (or, claimed
// started, handed to user code) after the listener reported paused.
func TestListenerReleasesWhatAClaimInFlightReturnsAfterPause(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "claim", true: "direct claim"}[direct], func(t *testing.T) {
			g := gatedSource{fakeSource: &fakeSource{available: 3}, waiting: make(chan struct{}, 1), gate: make(chan struct{})}
			var src transport.Source = g
			if direct {
				src = gatedDirect{g}
			}
			l := newListener(t, src, receiver.Config{Concurrency: 4, BufferSize: 8})
			select {
			case <-g.waiting:
			case <-time.After(10 * time.Second):
				t.Fatal("no claim reached the source")
			}
			if err := l.Pause(context.Background()); err != nil {
				t.Fatal(err)
			}
			close(g.gate)
			eventually(t, "the rows the held claim took released", func() bool {
				g.mu.Lock()
				defer g.mu.Unlock()
				return g.next > 0 && g.released == g.next
			})
			select {
			case m := <-l.Messages():
				t.Fatalf("message %s reached user code after Pause", m.UUID)
			default:
			}
			if s := l.State(); s.Status != transport.StatusPaused || s.Buffered != 0 || s.InFlight != 0 {
				t.Fatalf("state = %+v, want paused holding nothing", s)
			}
		})
	}
}
