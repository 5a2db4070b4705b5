package receiver_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// gateSource loses the lease of deliveries whose ID is "lost" and records
// every settlement.
type gateSource struct {
	mu       sync.Mutex
	mapped   []*transport.Delivery
	dead     map[string]string
	retried  map[string]time.Duration
	done     []string
	released []string
}

func newGateSource() *gateSource {
	return &gateSource{dead: map[string]string{}, retried: map[string]time.Duration{}}
}

func (s *gateSource) Claim(context.Context, int) ([]*transport.Delivery, error) { return nil, nil }
func (s *gateSource) Map(d *transport.Delivery) (*message.Message, error) {
	s.mu.Lock()
	s.mapped = append(s.mapped, d)
	s.mu.Unlock()
	return message.NewMessage(d.ID, []byte(d.Raw.(string))), nil
}
func (s *gateSource) Begin(_ context.Context, d *transport.Delivery) error {
	if d.ID == "lost" {
		return transport.ErrLeaseLost
	}
	d.Attempt++
	return nil
}
func (s *gateSource) Complete(_ context.Context, d *transport.Delivery) error {
	s.mu.Lock()
	s.done = append(s.done, d.ID)
	s.mu.Unlock()
	return nil
}
func (s *gateSource) Retry(_ context.Context, d *transport.Delivery, delay time.Duration, _ string) error {
	s.mu.Lock()
	s.retried[d.ID] = delay
	s.mu.Unlock()
	return nil
}
func (s *gateSource) Release(_ context.Context, ds []*transport.Delivery) error {
	s.mu.Lock()
	for _, d := range ds {
		s.released = append(s.released, d.ID)
	}
	s.mu.Unlock()
	return nil
}
func (s *gateSource) DeadLetter(_ context.Context, d *transport.Delivery, _ *message.Message, reason string) error {
	s.mu.Lock()
	s.dead[d.ID] = reason
	s.mu.Unlock()
	return nil
}
func (s *gateSource) Close(context.Context) error { return nil }

func start(t *testing.T, src transport.Source, p receiver.Config) (receiver.Stage, chan *message.Message) {
	t.Helper()
	out := make(chan *message.Message)
	r, err := receiver.NewStage(receiver.StageParams{Source: src, Config: p, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = r.Close(ctx)
	})
	return r, out
}

func recv(t *testing.T, out chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m := <-out:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	return nil
}

func TestLeaseLostNeverReachesUserCode(t *testing.T) {
	src := newGateSource()
	r, out := start(t, src, receiver.Config{Concurrency: 1})
	r.Push([]*transport.Delivery{{ID: "lost", Raw: "a"}, {ID: "kept", Raw: "b"}})
	m := recv(t, out)
	if m.UUID != "kept" {
		t.Fatalf("got %s, want kept (lost lease must be skipped)", m.UUID)
	}
	m.Ack()
}

func TestRawDroppedAfterMapping(t *testing.T) {
	src := newGateSource()
	r, out := start(t, src, receiver.Config{Concurrency: 1})
	r.Push([]*transport.Delivery{{ID: "m", Raw: "payload"}})
	m := recv(t, out)
	src.mu.Lock()
	d := src.mapped[0]
	src.mu.Unlock()
	if d.Raw != nil {
		t.Fatalf("raw payload retained after mapping: %v", d.Raw)
	}
	if string(m.Payload) != "payload" || m.Metadata.Get(transport.MetadataAttempt) != "1" || m.Metadata.Get(transport.MetadataMessageID) != "m" {
		t.Fatalf("message %s %q %v", m.UUID, m.Payload, m.Metadata)
	}
	m.Ack()
}

func TestNackRetriesWithBackoffThenDeadLetters(t *testing.T) {
	src := newGateSource()
	r, out := start(t, src, receiver.Config{Concurrency: 2, MaxAttempts: 3, RetryDelay: 100 * time.Millisecond})
	r.Push([]*transport.Delivery{{ID: "a", Attempt: 1, Raw: "x"}, {ID: "b", Attempt: 2, Raw: "x"}})
	for range 2 {
		recv(t, out).Nack()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		src.mu.Lock()
		da, rb := src.retried["a"], src.dead["b"]
		src.mu.Unlock()
		// a: Begin made it attempt 2 → retry after 200ms; b: attempt 3 → dead.
		if da == 200*time.Millisecond && rb != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retried %v dead %v", src.retried, src.dead)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCloseReleasesBufferAndHandsBackInFlight(t *testing.T) {
	src := newGateSource()
	out := make(chan *message.Message)
	r, err := receiver.NewStage(receiver.StageParams{Source: src, Config: receiver.Config{Concurrency: 1}, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	r.Push([]*transport.Delivery{{ID: "1", Raw: "x"}, {ID: "2", Raw: "x"}, {ID: "3", Raw: "x"}})
	m := recv(t, out) // held, never acked
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// Close gave messages back unsettled: it says so, like
	// http.Server.Shutdown.
	if err := r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	select {
	case <-m.Context().Done():
	default:
		t.Fatal("message context not cancelled after close")
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if len(src.released) != 2 {
		t.Fatalf("released %v, want the 2 buffered", src.released)
	}
	if _, ok := src.retried["1"]; !ok {
		t.Fatalf("in-flight message not handed back: %v", src.retried)
	}
	if r.Free() != 0 {
		t.Fatal("closed receiver reports free space")
	}
}

type recordingObserver struct {
	transport.NopObserver
	mu       sync.Mutex
	outcomes map[string]transport.Outcome
	names    []string
	settles  map[string]transport.SettleOp // by message UUID
	early    []string                      // outcomes reported before their settlement
}

func (o *recordingObserver) Delivering(ctx context.Context, name string, msg *message.Message) (context.Context, func(transport.Outcome)) {
	o.mu.Lock()
	o.names = append(o.names, name)
	o.mu.Unlock()
	return ctx, func(out transport.Outcome) {
		o.mu.Lock()
		o.outcomes[msg.UUID] = out
		if _, ok := o.settles[msg.UUID]; !ok && o.settles != nil {
			o.early = append(o.early, msg.UUID)
		}
		o.mu.Unlock()
	}
}

func (o *recordingObserver) Settled(_ string, op transport.SettleOp, msg *message.Message, n int, start time.Time, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.settles != nil && msg != nil && n == 1 && err == nil && !start.IsZero() {
		o.settles[msg.UUID] = op
	}
}

func TestObserverSeesEveryOutcome(t *testing.T) {
	src := newGateSource()
	obs := &recordingObserver{outcomes: map[string]transport.Outcome{}, settles: map[string]transport.SettleOp{}}
	out := make(chan *message.Message)
	r, err := receiver.NewStage(receiver.StageParams{Source: src, Out: out, Name: "orders",
		Config: receiver.Config{Concurrency: 1, MaxAttempts: 2, RetryInPlace: receiver.RetryInPlaceOff, Observer: obs}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	r.Push([]*transport.Delivery{{ID: "a", Raw: "x"}, {ID: "b", Raw: "x"}, {ID: "c", Attempt: 1, Raw: "x"}})
	recv(t, out).Ack()
	recv(t, out).Nack()
	recv(t, out).Nack() // attempt 2 of 2: dead-lettered
	want := map[string]transport.Outcome{"a": transport.OutcomeAcked, "b": transport.OutcomeNacked, "c": transport.OutcomeDeadLettered}
	deadline := time.Now().Add(10 * time.Second)
	for {
		obs.mu.Lock()
		done := len(obs.outcomes) == 3
		obs.mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for id, w := range want {
		if obs.outcomes[id] != w {
			t.Errorf("%s: outcome %v, want %v", id, obs.outcomes[id], w)
		}
	}
	if len(obs.names) != 3 || obs.names[0] != "orders" {
		t.Errorf("listener names %v", obs.names)
	}
	wantOps := map[string]transport.SettleOp{"a": transport.SettleAck, "b": transport.SettleNack, "c": transport.SettleDeadLetter}
	for id, w := range wantOps {
		if op, ok := obs.settles[id]; !ok || op != w {
			t.Errorf("%s: settled by %v (reported %v), want %v", id, op, ok, w)
		}
	}
	if len(obs.early) > 0 {
		t.Errorf("outcomes reported before their settlement: %v", obs.early)
	}
}

// waitFor polls cond (the receiver gives no signal for these states).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A message in a batch frees its permit and its goroutine: held messages
// cost no goroutine each. When its batch ends, its ack completes it.
func TestBatchedMessagesHoldNoGoroutine(t *testing.T) {
	const n = 40
	src := newGateSource()
	obs := &recordingObserver{outcomes: map[string]transport.Outcome{}}
	r, out := start(t, src, receiver.Config{Concurrency: 2, Observer: obs})
	before := runtime.NumGoroutine()
	ds := make([]*transport.Delivery, n)
	for i := range ds {
		ds[i] = &transport.Delivery{ID: strconv.Itoa(i), Raw: "x"}
	}
	r.Push(ds)
	msgs := make([]*message.Message, n)
	settles := make([]func(), n)
	stops := make([]func() bool, n)
	for i := range msgs {
		msgs[i] = recv(t, out)
		settles[i], stops[i] = receiver.JoinBatch(msgs[i], func() { t.Errorf("message %d dropped", i) })
	}
	waitFor(t, "the process goroutines to exit", func() bool {
		return r.InFlight() == 0 && runtime.NumGoroutine() < before+n/4
	})
	if h := r.Holding(); h != n {
		t.Fatalf("holding %d, want %d", h, n)
	}
	for i, m := range msgs {
		stops[i]() // the batch runs: no more drops
		settles[i]()
		if i%2 == 0 {
			m.Ack()
		} else {
			m.Nack()
		}
	}
	waitFor(t, "every outcome", func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return len(obs.outcomes) == n
	})
	src.mu.Lock()
	defer src.mu.Unlock()
	if len(src.done) != n/2 || len(src.retried) != n/2 {
		t.Fatalf("completed %d, retried %d; want %d each", len(src.done), len(src.retried), n/2)
	}
}

// Close hands back a message a batch still holds when its deadline passes:
// the batch learns it (its drop runs, the context is cancelled), the
// message is retried once, and settling it later changes nothing.
func TestCloseHandsBackBatchedMessages(t *testing.T) {
	src := newGateSource()
	obs := &recordingObserver{outcomes: map[string]transport.Outcome{}}
	out := make(chan *message.Message)
	r, err := receiver.NewStage(receiver.StageParams{Source: src, Out: out,
		Config: receiver.Config{Concurrency: 1, Observer: obs}})
	if err != nil {
		t.Fatal(err)
	}
	r.Push([]*transport.Delivery{{ID: "held", Raw: "x"}})
	m := recv(t, out)
	dropped := make(chan struct{})
	settle, _ := receiver.JoinBatch(m, func() { close(dropped) })
	waitFor(t, "the permit to be freed", func() bool { return r.InFlight() == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// Close gave messages back unsettled: it says so, like
	// http.Server.Shutdown.
	if err := r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	select {
	case <-dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("the batch was not told to drop the member")
	}
	if m.Context().Err() == nil {
		t.Fatal("message context not cancelled")
	}
	settle()
	m.Nack()
	src.mu.Lock()
	_, retried := src.retried["held"]
	src.mu.Unlock()
	obs.mu.Lock()
	outcome := obs.outcomes[m.UUID]
	obs.mu.Unlock()
	if !retried || outcome != transport.OutcomeAbandoned {
		t.Fatalf("retried %v, outcome %v; want handed back and abandoned", retried, outcome)
	}
}

// The reason recorded with receiver.SetNackReason follows the attempt
// count in the dead-letter reason; a nack that is retried keeps none.
func TestDeadLetterReasonFromHandler(t *testing.T) {
	src := newGateSource()
	r, out := start(t, src, receiver.Config{Concurrency: 2, MaxAttempts: 2, RetryDelay: -1})
	// Begin counts the attempt: "last" is on its 2nd of 2, "retried" on its 1st.
	r.Push([]*transport.Delivery{{ID: "last", Attempt: 1, Raw: "x"}, {ID: "retried", Raw: "x"}})
	for range 2 {
		m := recv(t, out)
		if !receiver.SetNackReason(m, "order "+m.UUID+": card declined") {
			t.Fatal("SetNackReason on a delivered message reported false")
		}
		m.Nack()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		src.mu.Lock()
		dead := src.dead["last"]
		_, retried := src.retried["retried"]
		src.mu.Unlock()
		if dead != "" && retried {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead %v, retried %v", src.dead, src.retried)
		}
		time.Sleep(time.Millisecond)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if want := "nacked on attempt 2 of 2 (MaxAttempts): order last: card declined"; src.dead["last"] != want {
		t.Errorf("dead-letter reason %q, want %q", src.dead["last"], want)
	}
	if _, ok := src.dead["retried"]; ok {
		t.Errorf("the retried message was dead-lettered: %v", src.dead)
	}
}

// Deliveries claimed started go to user code on the permits Reserve took,
// without the lease gate; the others are buffered and gated; a permit
// reserved and not used is freed. A started delivery that never reached
// user code is released on close, the one user code held is handed back.
func TestStartedDeliveriesSkipTheGate(t *testing.T) {
	src := newGateSource()
	r, out := start(t, src, receiver.Config{Concurrency: 3})
	if got := r.Reserve(5); got != 3 {
		t.Fatalf("Reserve(5) with 3 idle permits = %d, want 3", got)
	}
	r.PushReserved([]*transport.Delivery{
		{ID: "s1", Attempt: 1, Started: true, Raw: "a"},
		{ID: "b1", Raw: "b"},
		{ID: "s2", Attempt: 1, Started: true, Raw: "c"},
	}, 3)
	got := map[string]string{}
	var held []*message.Message
	for range 3 {
		m := recv(t, out)
		got[m.UUID] = m.Metadata.Get(transport.MetadataAttempt)
		held = append(held, m)
	}
	// Begin adds one to Attempt: a started delivery that passed it would
	// read 2.
	if got["s1"] != "1" || got["s2"] != "1" || got["b1"] != "1" {
		t.Fatalf("attempts = %v, want 1 each (started ones not gated, b1 gated once)", got)
	}
	if n := r.Reserve(1); n != 0 {
		t.Fatalf("Reserve with every permit in use = %d, want 0", n)
	}
	r.PushReserved(nil, 0)
	for _, m := range held {
		m.Ack()
	}
	eventually(t, "acks settled", func() bool { return r.InFlight() == 0 })

	// Two started deliveries; user code reads one and holds it, the other
	// waits for the channel when the stage closes.
	if got := r.Reserve(2); got != 2 {
		t.Fatalf("Reserve(2) = %d, want 2", got)
	}
	r.PushReserved([]*transport.Delivery{
		{ID: "s3", Attempt: 1, Started: true, Raw: "d"},
		{ID: "s4", Attempt: 1, Started: true, Raw: "e"},
	}, 2)
	first := recv(t, out)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_ = r.Close(ctx)
	other := map[string]string{"s3": "s4", "s4": "s3"}[first.UUID]
	src.mu.Lock()
	defer src.mu.Unlock()
	if _, ok := src.retried[first.UUID]; !ok || len(src.released) != 1 || src.released[0] != other {
		t.Fatalf("retried %v, released %v; want %s handed back, %s released", src.retried, src.released, first.UUID, other)
	}
}

// Reserve leaves one free permit per buffered delivery and takes the rest:
// a delivery waiting in the buffer (here for its key) keeps a permit for
// when it may go, and a claim made meanwhile still starts its rows at once
// on the others (before, any buffered delivery made Reserve take none, and
// every claim after it was buffered and gated in turn).
func TestReserveLeavesBufferedDeliveriesTheirPermits(t *testing.T) {
	src := newSeqSource()
	r, out := start(t, src, receiver.Config{Concurrency: 4})
	r.Push(deliveries("k-1", "k-2"))
	first := recv(t, out) // k-1 holds a permit; k-2 waits for its key
	eventually(t, "k-2 waiting in the buffer", func() bool { return r.Buffered() == 1 && r.InFlight() == 1 })
	if got := r.Reserve(5); got != 2 {
		t.Fatalf("Reserve(5) with 4 permits, 1 in flight and 1 delivery buffered = %d, want 2", got)
	}
	if got := r.Reserve(1); got != 0 {
		t.Fatalf("Reserve(1) with only the buffered delivery's permit free = %d, want 0", got)
	}
	r.PushReserved(nil, 2)
	first.Ack()
	if m := recv(t, out); m.UUID != "k-2" {
		t.Fatalf("got %s, want k-2 once k-1 settled", m.UUID)
	} else {
		m.Ack()
	}
	eventually(t, "acks settled", func() bool { return r.InFlight() == 0 })
}

// slowAckSource is a gateSource whose Complete waits until release is
// closed, reporting each call on entered.
type slowAckSource struct {
	*gateSource
	entered chan string
	release chan struct{}
}

func (s *slowAckSource) Complete(ctx context.Context, d *transport.Delivery) error {
	s.entered <- d.ID
	<-s.release
	return s.gateSource.Complete(ctx, d)
}

// An acked message's settlement moves from its permit to a settle slot, so
// the next delivery goes to user code while the ack's call is still out;
// with every slot taken, a settlement keeps its permit, and nothing more is
// delivered until one ends. A lone ack moves too: its permit is free for
// the next claim's rows.
func TestSettlementFreesThePermit(t *testing.T) {
	src := &slowAckSource{gateSource: newGateSource(), entered: make(chan string, 3), release: make(chan struct{})}
	r, out := start(t, src, receiver.Config{Concurrency: 1})
	r.Push([]*transport.Delivery{{ID: "a", Raw: "a"}, {ID: "b", Raw: "b"}, {ID: "c", Raw: "c"}})
	recv(t, out).Ack()
	if id := <-src.entered; id != "a" {
		t.Fatalf("first ack for %s, want a", id)
	}
	b := recv(t, out) // delivered while a's ack is still out
	if b.UUID != "b" {
		t.Fatalf("got %s, want b", b.UUID)
	}
	if p, s := r.Permits(); p != 1 || s != 1 || r.InFlight() != 2 {
		t.Fatalf("permits %d, slots %d, in flight %d; want 1, 1, 2", p, s, r.InFlight())
	}
	b.Ack()
	if id := <-src.entered; id != "b" {
		t.Fatalf("second ack for %s, want b", id)
	}
	// The one slot is a's: b settles on its permit, c stays buffered.
	if p, s := r.Permits(); p != 1 || s != 1 || r.Buffered() != 1 {
		t.Fatalf("permits %d, slots %d, buffered %d; want 1, 1, 1", p, s, r.Buffered())
	}
	close(src.release)
	recv(t, out).Ack()
	eventually(t, "every settlement done", func() bool {
		p, s := r.Permits()
		return r.InFlight() == 0 && p == 0 && s == 0
	})
	src.mu.Lock()
	if len(src.done) != 3 {
		t.Fatalf("completed %v, want a, b and c", src.done)
	}
	src.mu.Unlock()
	if id := <-src.entered; id != "c" {
		t.Fatalf("third ack for %s, want c", id)
	}

	src.release = make(chan struct{})
	r.Push([]*transport.Delivery{{ID: "d", Raw: "d"}})
	recv(t, out).Ack()
	if id := <-src.entered; id != "d" {
		t.Fatalf("lone ack for %s, want d", id)
	}
	if p, s := r.Permits(); p != 0 || s != 1 {
		t.Fatalf("lone ack: permits %d, slots %d; want 0, 1 (the permit is free while it settles)", p, s)
	}
	close(src.release)
}

// asyncAckSource is a gateSource that also acks asynchronously: each
// CompleteAsync call is kept until the test calls its done. A delivery
// with ID "panic" makes CompleteAsync panic.
type asyncAckSource struct {
	*gateSource
	async chan asyncAck
	sync  chan string // Complete calls
}

type asyncAck struct {
	id   string
	done func(error)
}

func (s *asyncAckSource) CompleteAsync(_ context.Context, d *transport.Delivery, done func(error)) {
	if d.ID == "panic" {
		panic("CompleteAsync")
	}
	s.async <- asyncAck{id: d.ID, done: done}
}

func (s *asyncAckSource) Complete(ctx context.Context, d *transport.Delivery) error {
	s.sync <- d.ID
	return s.gateSource.Complete(ctx, d)
}

// An ack on a settle slot goes to an AsyncCompleter without the worker
// waiting for it: the next delivery is processed while the outcome is out,
// the slot stays taken, the observer hears of the outcome only once it
// came, and Close waits for it. An ack that settles on its permit (no slot
// free) calls Complete as before.
func TestAsyncAckFreesTheWorker(t *testing.T) {
	src := &asyncAckSource{gateSource: newGateSource(), async: make(chan asyncAck, 4), sync: make(chan string, 4)}
	obs := &recordingObserver{outcomes: map[string]transport.Outcome{}}
	r, out := start(t, src, receiver.Config{Concurrency: 1, Observer: obs, CloseGrace: 100 * time.Millisecond})
	r.Push([]*transport.Delivery{{ID: "a", Raw: "a"}, {ID: "b", Raw: "b"}})
	recv(t, out).Ack()
	var a asyncAck
	select {
	case a = <-src.async:
	case id := <-src.sync:
		t.Fatalf("ack of %s went to Complete, want CompleteAsync", id)
	case <-time.After(10 * time.Second):
		t.Fatal("no ack")
	}
	if a.id != "a" {
		t.Fatalf("async ack for %s, want a", a.id)
	}
	b := recv(t, out) // delivered while a's outcome is out
	if p, s := r.Permits(); p != 1 || s != 1 {
		t.Fatalf("permits %d, slots %d; want 1, 1", p, s)
	}
	obs.mu.Lock()
	_, early := obs.outcomes["a"]
	obs.mu.Unlock()
	if early {
		t.Fatal("a's outcome reported before its ack came back")
	}
	b.Ack() // the one slot is a's: b settles on its permit, synchronously
	if id := <-src.sync; id != "b" {
		t.Fatalf("sync ack for %s, want b", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- r.Close(ctx) }()
	if err := <-closed; err == nil {
		t.Fatal("Close returned nil while an ack's outcome was still out")
	}
	a.done(nil)
	a.done(errors.New("a second call is ignored"))
	eventually(t, "a's settlement done", func() bool {
		_, s := r.Permits()
		return s == 0 && r.InFlight() == 0
	})
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.outcomes["a"] != transport.OutcomeAcked || obs.outcomes["b"] != transport.OutcomeAcked {
		t.Fatalf("outcomes %v, want a and b acked", obs.outcomes)
	}
}

// A panicking CompleteAsync faults the stage and ends the flight: its slot
// is freed and Close does not wait for an outcome that will never come.
func TestAsyncAckPanicEndsTheFlight(t *testing.T) {
	src := &asyncAckSource{gateSource: newGateSource(), async: make(chan asyncAck, 1), sync: make(chan string, 1)}
	r, out := start(t, src, receiver.Config{Concurrency: 1})
	r.Push([]*transport.Delivery{{ID: "panic", Raw: "x"}})
	recv(t, out).Ack()
	eventually(t, "the stage faulted", func() bool { return r.Fault() != nil })
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, s := r.Permits(); s != 0 || r.InFlight() != 0 {
		t.Fatalf("slots %d, in flight %d after Close; want 0, 0", s, r.InFlight())
	}
}
