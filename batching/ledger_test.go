package batching_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// These tests keep a ledger: every member that enters a batch adds one to
// its own listener's pending count, and every terminal subtracts it exactly
// once.

func TestPerListenerCounting(t *testing.T) {
	a, b := newListener(), newListener()
	rec := &recorder{gate: make(chan struct{})}
	clock := newFakeClock()
	h, err := batching.NewHandler(batching.Config{MaxSize: 3, Clock: clock}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())

	msgs := []*message.Message{a.msg("a1"), b.msg("b1"), a.msg("a2")}
	var results []<-chan error
	for _, m := range msgs {
		results = append(results, handleAsync(h, m))
	}
	eventually(t, "the batch to run", func() bool { return rec.Calls() == 1 })
	if got := a.pending.Load(); got != 2 {
		t.Errorf("listener a pending = %d, want 2", got)
	}
	if got := b.pending.Load(); got != 1 {
		t.Errorf("listener b pending = %d, want 1", got)
	}
	if a.Detached() != 2 || b.Detached() != 1 {
		t.Errorf("detached permits a=%d b=%d, want 2 and 1", a.Detached(), b.Detached())
	}

	close(rec.gate)
	for i, r := range results {
		if err := <-r; err != nil {
			t.Errorf("member %d: %v", i, err)
		}
	}
	if a.pending.Load() != 0 || b.pending.Load() != 0 {
		t.Errorf("pending after the batch: a=%d b=%d, want 0", a.pending.Load(), b.pending.Load())
	}
}

func TestLocalPublishesAreNotCounted(t *testing.T) {
	l := newListener()
	rec := &recorder{gate: make(chan struct{})}
	h, err := batching.NewHandler(batching.Config{MaxSize: 3, Clock: newFakeClock()}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())

	r1 := handleAsync(h, localMsg("local1"))
	r2 := handleAsync(h, l.msg("tracked"))
	r3 := handleAsync(h, localMsg("local2"))
	eventually(t, "the batch to run", func() bool { return rec.Calls() == 1 })
	if got := l.pending.Load(); got != 1 {
		t.Errorf("pending = %d, want 1 (only the tracked member)", got)
	}
	close(rec.gate)
	for _, r := range []<-chan error{r1, r2, r3} {
		if err := <-r; err != nil {
			t.Error(err)
		}
	}
	if got := l.pending.Load(); got != 0 {
		t.Errorf("pending = %d after the batch, want 0", got)
	}
}

// TestSettleOnceUnderEveryTerminal drives one batch of two listeners'
// members to each terminal and checks the ledger: counts back to zero, a
// member re-entering batching after its terminal is not counted again, and
// every message got exactly one outcome.
func TestSettleOnceUnderEveryTerminal(t *testing.T) {
	boom := errors.New("boom")
	terminals := []struct {
		name   string
		cfg    batching.Config
		result func([]*message.Message) error
		end    func(t *testing.T, h *batching.Handler, clock *fakeClock, cancel context.CancelFunc)
		want   []string // each member's outcome: "ok" or the error it must match
	}{
		{
			name: "success",
			end:  func(t *testing.T, h *batching.Handler, c *fakeClock, _ context.CancelFunc) { c.Advance(time.Hour) },
			want: []string{"ok", "ok", "ok"},
		},
		{
			name:   "failure",
			result: func([]*message.Message) error { return boom },
			end:    func(t *testing.T, h *batching.Handler, c *fakeClock, _ context.CancelFunc) { c.Advance(time.Hour) },
			want:   []string{"boom", "boom", "boom"},
		},
		{
			name:   "partial failure",
			result: func([]*message.Message) error { return batching.Fail(boom, 1) },
			end:    func(t *testing.T, h *batching.Handler, c *fakeClock, _ context.CancelFunc) { c.Advance(time.Hour) },
			want:   []string{"ok", "boom", "ok"},
		},
		{
			name: "discard",
			end: func(t *testing.T, h *batching.Handler, c *fakeClock, cancel context.CancelFunc) {
				cancel() // the middle member's context
			},
			want: []string{"", "discarded", ""}, // the others are still open
		},
		{
			name: "shutdown flush",
			end: func(t *testing.T, h *batching.Handler, c *fakeClock, _ context.CancelFunc) {
				if err := h.Close(context.Background()); err != nil {
					t.Error(err)
				}
			},
			want: []string{"ok", "ok", "ok"},
		},
		{
			name: "shutdown nack",
			cfg:  batching.Config{NackOnClose: true},
			end: func(t *testing.T, h *batching.Handler, c *fakeClock, _ context.CancelFunc) {
				if err := h.Close(context.Background()); err != nil {
					t.Error(err)
				}
			},
			want: []string{"closed", "closed", "closed"},
		},
	}
	for _, tt := range terminals {
		t.Run(tt.name, func(t *testing.T) {
			a, b := newListener(), newListener()
			clock := newFakeClock()
			cfg := tt.cfg
			cfg.MaxSize, cfg.MaxWait, cfg.Clock = 10, time.Minute, clock
			rec := &recorder{result: tt.result}
			h, err := batching.NewHandler(cfg, rec.fn)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(context.Background())

			msgs := []*message.Message{a.msg("a1"), b.msg("b1"), a.msg("a2")}
			ctx, cancel := context.WithCancel(msgs[1].Context())
			defer cancel()
			msgs[1].SetContext(ctx)
			var results []<-chan error
			for i, m := range msgs { // in order, so indexes are known
				results = append(results, handleAsync(h, m))
				eventually(t, "the member to enter", func() bool { return a.pending.Load()+b.pending.Load() == i+1 })
			}
			eventually(t, "the batch timer", func() bool { return clock.Waiters() == 1 })

			tt.end(t, h, clock, cancel)
			got := make([]error, len(msgs))
			for i, want := range tt.want {
				if want == "" {
					continue
				}
				got[i] = <-results[i]
				checkOutcome(t, i, got[i], want, boom)
			}
			if tt.name == "discard" {
				if b.pending.Load() != 0 || a.pending.Load() != 2 {
					t.Fatalf("after discard: a=%d b=%d, want 2 and 0", a.pending.Load(), b.pending.Load())
				}
				// The rest of the batch still runs, without the discarded member.
				clock.Advance(time.Hour)
				for _, i := range []int{0, 2} {
					checkOutcome(t, i, <-results[i], "ok", boom)
				}
				if got := rec.Batches(); len(got) != 1 || len(got[0]) != 2 {
					t.Errorf("batches = %v, want one of [a1 a2]", got)
				}
			}
			if a.pending.Load() != 0 || b.pending.Load() != 0 {
				t.Errorf("pending a=%d b=%d, want 0", a.pending.Load(), b.pending.Load())
			}

			// A member that already ended is never counted again.
			for _, m := range msgs {
				receiver.EnterBatch(m)()
			}
			if a.pending.Load() != 0 || b.pending.Load() != 0 {
				t.Errorf("after re-entry: a=%d b=%d, want 0", a.pending.Load(), b.pending.Load())
			}
			if a.Detached() != 2 || b.Detached() != 1 {
				t.Errorf("detached a=%d b=%d, want 2 and 1", a.Detached(), b.Detached())
			}
		})
	}
}

func checkOutcome(t *testing.T, i int, err error, want string, boom error) {
	t.Helper()
	ok := false
	switch want {
	case "ok":
		ok = err == nil
	case "boom":
		ok = errors.Is(err, boom)
	case "discarded":
		ok = errors.Is(err, batching.ErrDiscarded) && errors.Is(err, context.Canceled)
	case "closed":
		ok = errors.Is(err, transport.ErrClosed)
	}
	if !ok {
		t.Errorf("member %d: got %v, want %s", i, err, want)
	}
}

// TestSettleIsGuardedAndClamped exercises the counter directly: a second
// settle is a no-op and does not eat another member's count, and the count
// never goes below zero.
func TestSettleIsGuardedAndClamped(t *testing.T) {
	l := newListener()
	m1, m2 := l.msg("1"), l.msg("2")
	s1 := receiver.EnterBatch(m1)
	s2 := receiver.EnterBatch(m2)
	if got := l.pending.Load(); got != 2 {
		t.Fatalf("pending = %d, want 2", got)
	}
	s1()
	s1()
	if got := l.pending.Load(); got != 1 {
		t.Fatalf("pending after double settle = %d, want 1", got)
	}
	noop := receiver.EnterBatch(m2) // already in a batch
	noop()
	if got := l.pending.Load(); got != 1 {
		t.Fatalf("pending after re-entry = %d, want 1", got)
	}
	s2()
	s2()
	s1()
	if got := l.pending.Load(); got != 0 {
		t.Fatalf("pending = %d, want 0", got)
	}
	receiver.EnterBatch(localMsg("local"))()
	if got := l.pending.Load(); got != 0 {
		t.Fatalf("pending = %d, want 0", got)
	}
}

// TestOnChange checks that the listener's back-pressure hook sees every
// change batching makes.
func TestOnChange(t *testing.T) {
	changes := make(chan int, 16)
	var p *receiver.Pending
	p = receiver.NewPending(func() { changes <- p.Load() })
	m := message.NewMessage("1", nil)
	ctx, _ := receiver.NewMessageContext(context.Background(), p, nil)
	m.SetContext(ctx)

	h, err := batching.NewHandler(batching.Config{MaxSize: 1}, func(context.Context, []*message.Message) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	if err := h.Handle(m); err != nil {
		t.Fatal(err)
	}
	if a, b := <-changes, <-changes; a != 1 || b != 0 {
		t.Errorf("changes = %d, %d, want 1, 0", a, b)
	}
}
