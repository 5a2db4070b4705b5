package batching_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

func TestConfig(t *testing.T) {
	d := batching.Config{}.WithDefaults()
	if d.MaxSize != batching.DefaultMaxSize || d.MaxWait != batching.DefaultMaxWait ||
		d.Concurrency != batching.DefaultConcurrency || d.FlushTimeout != batching.DefaultFlushTimeout ||
		d.Logger == nil || d.Clock == nil {
		t.Errorf("defaults = %+v", d)
	}
	if err := (batching.Config{}).Validate(); err != nil {
		t.Errorf("zero config: %v", err)
	}
	err := batching.Config{MaxSize: -1, MaxWait: -1, Concurrency: -1, FlushTimeout: -1}.Validate()
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"MaxSize", "MaxWait", "Concurrency", "FlushTimeout"} {
		if !strings.Contains(err.Error(), field+":") {
			t.Errorf("Validate does not name %s: %v", field, err)
		}
	}
	if _, err := batching.NewHandler(batching.Config{MaxSize: -1}, nil); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("NewHandler = %v, want ErrInvalidConfig", err)
	}
	if _, err := batching.NewHandler(batching.Config{}, nil); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("NewHandler(nil func) = %v, want ErrInvalidConfig", err)
	}
	msgs := make(chan *message.Message)
	if err := batching.Consume(context.Background(), msgs, batching.Config{MaxWait: -1}, (&recorder{}).fn); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("Consume = %v, want ErrInvalidConfig", err)
	}
}

// enter hands msgs to h in order, waiting for each to enter (counted by l).
func enter(t *testing.T, h *batching.Handler, l *listener, msgs ...*message.Message) []<-chan error {
	t.Helper()
	var out []<-chan error
	base := l.Detached() // monotonic, unlike the pending count
	for i, m := range msgs {
		out = append(out, handleAsync(h, m))
		eventually(t, "the member to enter", func() bool { return l.Detached() >= base+i+1 })
	}
	return out
}

func wantNil(t *testing.T, results []<-chan error) {
	t.Helper()
	for i, r := range results {
		select {
		case err := <-r:
			if err != nil {
				t.Errorf("member %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("member %d: no outcome after 10s", i)
		}
	}
}

func TestFlushBySize(t *testing.T) {
	l := newListener()
	clock := newFakeClock()
	rec := &recorder{}
	h, err := batching.NewHandler(batching.Config{MaxSize: 3, MaxWait: time.Hour, Clock: clock}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())

	r := enter(t, h, l, l.msg("1"), l.msg("2"), l.msg("3"), l.msg("4"))
	wantNil(t, r[:3]) // without the clock moving
	eventually(t, "the second batch's timer", func() bool { return clock.Waiters() == 2 })
	if got := rec.Batches(); !slices.Equal(got[0], []string{"1", "2", "3"}) || len(got) != 1 {
		t.Fatalf("batches = %v", got)
	}
	clock.Advance(time.Hour)
	wantNil(t, r[3:])
	if got := rec.Batches(); len(got) != 2 || !slices.Equal(got[1], []string{"4"}) {
		t.Fatalf("batches = %v", got)
	}
}

func TestFlushByTime(t *testing.T) {
	l := newListener()
	clock := newFakeClock()
	rec := &recorder{}
	h, err := batching.NewHandler(batching.Config{MaxSize: 10, MaxWait: time.Second, Clock: clock}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())

	r := enter(t, h, l, l.msg("1"), l.msg("2"))
	eventually(t, "the batch timer", func() bool { return clock.Waiters() == 1 })
	clock.Advance(999 * time.Millisecond)
	if rec.Calls() != 0 {
		t.Fatal("batch ran before MaxWait")
	}
	clock.Advance(time.Millisecond)
	wantNil(t, r)
	if got := rec.Batches(); len(got) != 1 || !slices.Equal(got[0], []string{"1", "2"}) {
		t.Fatalf("batches = %v", got)
	}
}

func TestKeyGroupsMembers(t *testing.T) {
	l := newListener()
	clock := newFakeClock()
	rec := &recorder{}
	key := func(m *message.Message) string { return m.Metadata.Get("tenant") }
	h, err := batching.NewHandler(batching.Config{MaxSize: 2, Clock: clock, Key: key, Concurrency: 2}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())

	var msgs []*message.Message
	for i, tenant := range []string{"a", "b", "a", "b", "c"} {
		m := l.msg(fmt.Sprintf("%s%d", tenant, i))
		m.Metadata.Set("tenant", tenant)
		msgs = append(msgs, m)
	}
	r := enter(t, h, l, msgs...)
	wantNil(t, r[:4])
	// Every batch goroutine starts a timer; wait for c's before moving on.
	eventually(t, "three batch timers", func() bool { return clock.Waiters() == 3 })
	clock.Advance(time.Hour)
	wantNil(t, r[4:])
	got := rec.Batches()
	slices.SortFunc(got, func(x, y []string) int { return strings.Compare(x[0], y[0]) })
	want := [][]string{{"a0", "a2"}, {"b1", "b3"}, {"c4"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batches = %v, want %v", got, want)
	}
}

func TestKeyPanicNacksTheMessage(t *testing.T) {
	h, err := batching.NewHandler(batching.Config{Key: func(*message.Message) string { panic("no key") }}, (&recorder{}).fn)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	l := newListener()
	if err := h.Handle(l.msg("x")); err == nil {
		t.Fatal("Handle = nil, want the key panic")
	}
	if l.pending.Load() != 0 {
		t.Fatal("a rejected message was counted")
	}
}

// TestConcurrencyHoldsSealedBatches: with one slot, a full batch waits for
// the running one; its members stay counted and no one joins it.
func TestConcurrencyHoldsSealedBatches(t *testing.T) {
	l := newListener()
	rec := &recorder{gate: make(chan struct{})}
	h, err := batching.NewHandler(batching.Config{MaxSize: 2, Clock: newFakeClock()}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())

	r := enter(t, h, l, l.msg("1"), l.msg("2"), l.msg("3"), l.msg("4"), l.msg("5"))
	eventually(t, "the first batch", func() bool { return rec.Calls() == 1 })
	if got := l.pending.Load(); got != 5 {
		t.Fatalf("pending = %d, want 5", got)
	}
	rec.gate <- struct{}{}
	wantNil(t, r[:2])
	eventually(t, "the second batch", func() bool { return rec.Calls() == 2 })
	if got := rec.Batches()[1]; !slices.Equal(got, []string{"3", "4"}) {
		t.Fatalf("second batch = %v", got)
	}
	close(rec.gate)
	wantNil(t, r[2:4])
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantNil(t, r[4:])
	if l.pending.Load() != 0 {
		t.Fatalf("pending = %d", l.pending.Load())
	}
}

func TestCloseFlushesWithLiveContext(t *testing.T) {
	l := newListener()
	rec := &recorder{}
	h, err := batching.NewHandler(batching.Config{Clock: newFakeClock()}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	r := enter(t, h, l, l.msg("1"), l.msg("2"))
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantNil(t, r)
	if rec.ctxErrs[0] != nil {
		t.Errorf("final flush ran with a done context: %v", rec.ctxErrs[0])
	}
	if err := h.Handle(l.msg("late")); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Handle after Close = %v, want ErrClosed", err)
	}
	if err := h.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if rec.Calls() != 1 || l.pending.Load() != 0 {
		t.Errorf("calls=%d pending=%d, want 1 and 0", rec.Calls(), l.pending.Load())
	}
}

func TestCloseBeforeUse(t *testing.T) {
	h, err := batching.NewHandler(batching.Config{}, (&recorder{}).fn)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestForcedClose: when Close's context ends, the running batch's context is
// cancelled and the batch waiting for a slot is nacked without running.
func TestForcedClose(t *testing.T) {
	l := newListener()
	rec := &recorder{gate: make(chan struct{})} // never opened: waits for ctx
	h, err := batching.NewHandler(batching.Config{MaxSize: 2, Clock: newFakeClock()}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	r := enter(t, h, l, l.msg("1"), l.msg("2"), l.msg("3"), l.msg("4"))
	eventually(t, "the first batch", func() bool { return rec.Calls() == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v, want context.Canceled", err)
	}
	for i, res := range r {
		err := <-res
		switch i {
		case 0, 1: // ran, and failed with its cancelled context
			if !errors.Is(err, context.Canceled) {
				t.Errorf("member %d: %v, want context.Canceled", i, err)
			}
		default: // never ran
			if !errors.Is(err, transport.ErrClosed) {
				t.Errorf("member %d: %v, want ErrClosed", i, err)
			}
		}
	}
	if rec.Calls() != 1 || l.pending.Load() != 0 {
		t.Errorf("calls=%d pending=%d, want 1 and 0", rec.Calls(), l.pending.Load())
	}
}

func TestBatchFuncPanicNacksTheBatch(t *testing.T) {
	l := newListener()
	h, err := batching.NewHandler(batching.Config{MaxSize: 2}, func(context.Context, []*message.Message) error { panic("bad") })
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	for i, res := range enter(t, h, l, l.msg("1"), l.msg("2")) {
		if err := <-res; err == nil {
			t.Errorf("member %d: nil error after a panic", i)
		}
	}
	if l.pending.Load() != 0 {
		t.Fatalf("pending = %d", l.pending.Load())
	}
}

func TestPartialErrorOutOfRangeFailsTheBatch(t *testing.T) {
	l := newListener()
	pe := batching.Fail(nil, 0, 7)
	h, err := batching.NewHandler(batching.Config{MaxSize: 2}, func(context.Context, []*message.Message) error {
		return fmt.Errorf("insert: %w", pe)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	for i, res := range enter(t, h, l, l.msg("1"), l.msg("2")) {
		var got *batching.PartialError
		if err := <-res; !errors.As(err, &got) || got != pe {
			t.Errorf("member %d: %v, want the PartialError", i, err)
		}
	}
}

func TestPartialErrorWithoutCause(t *testing.T) {
	l := newListener()
	h, err := batching.NewHandler(batching.Config{MaxSize: 2}, func(context.Context, []*message.Message) error {
		return &batching.PartialError{Failed: map[int]error{1: nil}}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	r := enter(t, h, l, l.msg("1"), l.msg("2"))
	if err := <-r[0]; err != nil {
		t.Errorf("member 0: %v", err)
	}
	if err := <-r[1]; !errors.Is(err, batching.ErrMemberFailed) {
		t.Errorf("member 1: %v, want ErrMemberFailed", err)
	}
}

func TestDiscardAlreadyDoneContext(t *testing.T) {
	l := newListener()
	rec := &recorder{}
	h, err := batching.NewHandler(batching.Config{MaxSize: 2}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	m := l.msg("x")
	ctx, cancel := context.WithTimeout(m.Context(), 0)
	defer cancel()
	m.SetContext(ctx)
	if err := h.Handle(m); !errors.Is(err, batching.ErrDiscarded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Handle = %v, want ErrDiscarded and DeadlineExceeded", err)
	}
	if l.pending.Load() != 0 || rec.Calls() != 0 {
		t.Fatalf("pending=%d calls=%d", l.pending.Load(), rec.Calls())
	}
}

// A receiver giving up a member (its tracker's Cancel, as a Berth receiver
// does when Close's deadline passes) discards it from its open batch; the
// rest of the batch still runs.
func TestDiscardOnReceiverCancel(t *testing.T) {
	p := receiver.NewPending(nil)
	rec := &recorder{}
	clock := newFakeClock()
	h, err := batching.NewHandler(batching.Config{MaxSize: 10, MaxWait: time.Minute, Clock: clock}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	msgs := make([]*message.Message, 2)
	trackers := make([]*receiver.Tracker, 2)
	for i := range msgs {
		ctx, tr := receiver.NewMessageContext(context.Background(), p, nil)
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte("x"))
		msgs[i].SetContext(ctx)
		trackers[i] = tr
	}
	res := make([]chan error, 2)
	for i, m := range msgs {
		res[i] = make(chan error, 1)
		go func() { res[i] <- h.Handle(m) }()
	}
	eventually(t, "both members pending and the batch's timer set", func() bool { return p.Load() == 2 && clock.Waiters() == 1 })
	trackers[0].Cancel()
	if err := <-res[0]; !errors.Is(err, batching.ErrDiscarded) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle = %v, want ErrDiscarded and Canceled", err)
	}
	if p.Load() != 1 {
		t.Fatalf("pending = %d after the discard, want 1", p.Load())
	}
	clock.Advance(time.Minute)
	if err := <-res[1]; err != nil {
		t.Fatalf("the other member: %v", err)
	}
	if rec.Calls() != 1 || p.Load() != 0 {
		t.Fatalf("calls=%d pending=%d, want 1 and 0", rec.Calls(), p.Load())
	}
	trackers[1].Cancel()
}

// --- Consume ---

func TestConsumeAcksAndNacksOnce(t *testing.T) {
	l := newListener()
	ch := make(chan *message.Message)
	rec := &recorder{result: func(msgs []*message.Message) error {
		var pe batching.PartialError
		for i, m := range msgs {
			if strings.HasPrefix(string(m.Payload), "bad") {
				if pe.Failed == nil {
					pe.Failed = map[int]error{}
				}
				pe.Failed[i] = errors.New("bad")
			}
		}
		if pe.Failed != nil {
			return &pe
		}
		return nil
	}}
	done := make(chan error, 1)
	go func() {
		done <- batching.Consume(context.Background(), ch, batching.Config{MaxSize: 4, Clock: newFakeClock()}, rec.fn)
	}()

	var msgs []*message.Message
	for i := range 10 {
		p := fmt.Sprint("ok", i)
		if i%3 == 0 {
			p = fmt.Sprint("bad", i)
		}
		m := l.msg(p)
		msgs = append(msgs, m)
		ch <- m
	}
	close(ch) // flushes the last partial batch
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		want := "ack"
		if strings.HasPrefix(string(m.Payload), "bad") {
			want = "nack"
		}
		if got := outcome(m); got != want {
			t.Errorf("%s: %s, want %s", m.Payload, got, want)
		}
	}
	sizes := []int{}
	for _, b := range rec.Batches() {
		sizes = append(sizes, len(b))
	}
	slices.Sort(sizes) // batches are not ordered among themselves
	if !slices.Equal(sizes, []int{2, 4, 4}) {
		t.Errorf("batch sizes = %v, want [4 4 2]", sizes)
	}
	if l.pending.Load() != 0 {
		t.Fatalf("pending = %d", l.pending.Load())
	}
}

func TestConsumeFinalFlushOutlivesItsContext(t *testing.T) {
	l := newListener()
	ch := make(chan *message.Message)
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- batching.Consume(ctx, ch, batching.Config{Clock: newFakeClock()}, rec.fn) }()
	m1, m2 := l.msg("1"), l.msg("2")
	ch <- m1
	ch <- m2
	eventually(t, "both members", func() bool { return l.pending.Load() == 2 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Consume = %v, want context.Canceled", err)
	}
	if outcome(m1) != "ack" || outcome(m2) != "ack" {
		t.Fatalf("outcomes %s %s, want acks", outcome(m1), outcome(m2))
	}
	if rec.Calls() != 1 || rec.ctxErrs[0] != nil {
		t.Fatalf("calls=%d ctx err=%v, want one flush with a live context", rec.Calls(), rec.ctxErrs)
	}
}

func TestConsumeNackOnClose(t *testing.T) {
	l := newListener()
	ch := make(chan *message.Message, 2)
	rec := &recorder{}
	m1, m2 := l.msg("1"), localMsg("2")
	ch <- m1
	ch <- m2
	close(ch)
	if err := batching.Consume(context.Background(), ch, batching.Config{NackOnClose: true, Clock: newFakeClock()}, rec.fn); err != nil {
		t.Fatal(err)
	}
	if outcome(m1) != "nack" || outcome(m2) != "nack" || rec.Calls() != 0 || l.pending.Load() != 0 {
		t.Fatalf("outcomes %s %s calls=%d pending=%d", outcome(m1), outcome(m2), rec.Calls(), l.pending.Load())
	}
}

// TestConsumeFlushTimeoutForces: a final flush that outlasts FlushTimeout
// has its context cancelled; Consume waits for it and reports the timeout.
func TestConsumeFlushTimeoutForces(t *testing.T) {
	l := newListener()
	ch := make(chan *message.Message, 1)
	rec := &recorder{gate: make(chan struct{})} // returns only on ctx done
	m := l.msg("1")
	ch <- m
	close(ch)
	err := batching.Consume(context.Background(), ch, batching.Config{FlushTimeout: time.Millisecond, Clock: newFakeClock()}, rec.fn)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Consume = %v, want DeadlineExceeded", err)
	}
	if outcome(m) != "nack" || l.pending.Load() != 0 {
		t.Fatalf("outcome %s pending %d", outcome(m), l.pending.Load())
	}
}
