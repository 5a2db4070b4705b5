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
