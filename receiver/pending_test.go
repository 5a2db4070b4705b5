package receiver_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/berth-go/berth/receiver"
)

// hookCounter records BatchHooks calls in order.
type hookCounter struct {
	entered, left atomic.Int32
	order         []string
}

func (h *hookCounter) EnteredBatch() { h.entered.Add(1); h.order = append(h.order, "entered") }
func (h *hookCounter) LeftBatch()    { h.left.Add(1); h.order = append(h.order, "left") }

func trackedMessage(p *receiver.Pending, hooks receiver.BatchHooks) (*message.Message, *receiver.Tracker) {
	m := message.NewMessage("m", nil)
	ctx, t := receiver.NewMessageContext(context.Background(), p, hooks)
	m.SetContext(ctx)
	return m, t
}

// waitSignal fails the test if ch is not closed soon.
func waitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not signalled", what)
	}
}

// The hooks see the message enter and leave its batch once each, leaving
// after the count was settled.
func TestBatchHooksOncePerMember(t *testing.T) {
	p := receiver.NewPending(nil)
	h := &hookCounter{}
	m, _ := trackedMessage(p, h)
	settle, stop := receiver.JoinBatch(m, func() { t.Error("dropped") })
	if h.entered.Load() != 1 || p.Load() != 1 {
		t.Fatalf("entered %d, pending %d; want 1, 1", h.entered.Load(), p.Load())
	}
	if !stop() {
		t.Fatal("stop before cancel reported the drop already started")
	}
	settle()
	settle()
	if h.left.Load() != 1 || p.Load() != 0 {
		t.Fatalf("left %d, pending %d; want 1, 0", h.left.Load(), p.Load())
	}
	if len(h.order) != 2 || h.order[0] != "entered" || h.order[1] != "left" {
		t.Fatalf("hooks called %v", h.order)
	}
}

// The tracker's Cancel cancels the message context and drops the member,
// once; a stopped drop never runs.
func TestJoinBatchDropOnCancel(t *testing.T) {
	p := receiver.NewPending(nil)
	m, tr := trackedMessage(p, nil)
	dropped := make(chan struct{})
	settle, _ := receiver.JoinBatch(m, func() { close(dropped) })
	tr.Cancel()
	tr.Cancel()
	waitSignal(t, dropped, "drop after Cancel")
	if m.Context().Err() == nil {
		t.Fatal("message context not cancelled")
	}
	settle()

	m2, tr2 := trackedMessage(p, nil)
	_, stop := receiver.JoinBatch(m2, func() { t.Error("stopped drop ran") })
	if !stop() {
		t.Fatal("stop reported false before Cancel")
	}
	tr2.Cancel()
}

// A member joining with its context already cancelled is dropped at once.
func TestJoinBatchAlreadyCancelled(t *testing.T) {
	m, tr := trackedMessage(receiver.NewPending(nil), nil)
	tr.Cancel()
	dropped := make(chan struct{})
	settle, _ := receiver.JoinBatch(m, func() { close(dropped) })
	waitSignal(t, dropped, "drop of a cancelled message")
	settle()
}

// A context derived from the message context with its own cancellation (a
// router Timeout middleware) drops the member when it ends; so does the
// cancellable context of a message without a tracker.
func TestJoinBatchDerivedAndLocalContexts(t *testing.T) {
	p := receiver.NewPending(nil)
	m, tr := trackedMessage(p, nil)
	ctx, cancel := context.WithCancel(m.Context())
	m.SetContext(ctx)
	dropped := make(chan struct{})
	settle, _ := receiver.JoinBatch(m, func() { close(dropped) })
	cancel()
	waitSignal(t, dropped, "drop on the derived context")
	settle()
	tr.Cancel()

	local := message.NewMessage("local", nil)
	lctx, lcancel := context.WithCancel(context.Background())
	local.SetContext(lctx)
	ldropped := make(chan struct{})
	lsettle, _ := receiver.JoinBatch(local, func() { close(ldropped) })
	lcancel()
	waitSignal(t, ldropped, "drop of a local message")
	lsettle()

	never := message.NewMessage("never", nil)
	_, nstop := receiver.JoinBatch(never, func() { t.Error("drop ran for a context that is never done") })
	nstop()
}

// observed returns a message whose context is what an Observer's
// Delivering returned over the message context: cancellable (with its
// cancel) or values only.
func observed(p *receiver.Pending, cancellable bool) (*message.Message, *receiver.Tracker, context.CancelFunc) {
	m, tr := trackedMessage(p, nil)
	ctx := context.WithValue(m.Context(), observerKey{}, "span")
	cancel := context.CancelFunc(func() {})
	if cancellable {
		ctx, cancel = context.WithCancel(ctx)
	}
	m.SetContext(ctx)
	return m, tr, cancel
}

type observerKey struct{}

// A batch member whose observer context is cancelled is dropped; one whose
// observer context is not cancelled stays in its batch until the receiver
// cancels the message (then it is dropped, once) or its batch stops
// watching it.
func TestJoinBatchObserverContexts(t *testing.T) {
	p := receiver.NewPending(nil)

	m, tr, cancel := observed(p, true)
	dropped := make(chan struct{})
	settle, _ := receiver.JoinBatch(m, func() { close(dropped) })
	cancel()
	waitSignal(t, dropped, "drop on the cancelled observer context")
	settle()
	tr.Cancel()

	for _, cancellable := range []bool{true, false} {
		m, tr, cancel := observed(p, cancellable)
		defer cancel()
		var drops atomic.Int32
		dropped := make(chan struct{})
		settle, stop := receiver.JoinBatch(m, func() { drops.Add(1); close(dropped) })
		if m.Context().Err() != nil || drops.Load() != 0 {
			t.Fatalf("cancellable=%v: member dropped before any cancellation", cancellable)
		}
		tr.Cancel()
		tr.Cancel()
		waitSignal(t, dropped, "drop on the receiver's Cancel")
		if stop() {
			t.Errorf("cancellable=%v: stop after the drop reported it prevented it", cancellable)
		}
		settle()

		m2, tr2, cancel2 := observed(p, cancellable)
		defer cancel2()
		settle2, stop2 := receiver.JoinBatch(m2, func() { t.Errorf("cancellable=%v: stopped member dropped", cancellable) })
		if !stop2() {
			t.Errorf("cancellable=%v: stop before any cancellation reported false", cancellable)
		}
		settle2()
		tr2.Cancel()
	}
	if p.Load() != 0 {
		t.Fatalf("pending %d after every batch ended", p.Load())
	}
}

// Each JoinBatch has its own stop: a stale stop (of a batch the member
// left) does not remove the watch of the batch holding it now.
func TestJoinBatchStopIsPerRegistration(t *testing.T) {
	p := receiver.NewPending(nil)
	m, tr := trackedMessage(p, nil)
	settle, stopFirst := receiver.JoinBatch(m, func() { t.Error("first batch's drop ran after its stop") })
	if !stopFirst() {
		t.Fatal("first stop reported false")
	}
	settle()
	dropped := make(chan struct{})
	_, stopSecond := receiver.JoinBatch(m, func() { close(dropped) })
	if stopFirst() {
		t.Error("a stale stop removed the second batch's watch")
	}
	tr.Cancel()
	waitSignal(t, dropped, "second batch's drop after a stale stop")
	if stopSecond() {
		t.Error("stop after the drop started reported true")
	}
}

// A member whose context only the receiver can end (values added on top of
// the message context) is watched by its tracker, with no
// context.AfterFunc registration: fewer allocations than a context with a
// cancellation of its own.
func TestJoinBatchTrackerWatchAllocates(t *testing.T) {
	p := receiver.NewPending(nil)
	allocs := func(cancellable bool) float64 {
		return testing.AllocsPerRun(100, func() {
			m, tr, cancel := observed(p, cancellable)
			_ = m.Context().Done() // the channel exists before the measure, as a router's select makes it
			settle, stop := receiver.JoinBatch(m, func() {})
			stop()
			settle()
			cancel()
			tr.Cancel()
		})
	}
	if tracked, own := allocs(false), allocs(true); tracked >= own {
		t.Fatalf("JoinBatch on a values-only context: %.0f allocations, not fewer than the %.0f of a cancellable one", tracked, own)
	}
}
