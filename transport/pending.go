package transport

import (
	"context"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Pending counts the messages of one listener that batching stages hold.
// It is part of the listener's QueueCount, so back-pressure sees them.
type Pending struct {
	n        atomic.Int64
	onChange func()
}

// NewPending returns a counter that calls onChange (may be nil) after every
// change.
func NewPending(onChange func()) *Pending { return &Pending{onChange: onChange} }

// Load returns the current count.
func (p *Pending) Load() int { return int(p.n.Load()) }

func (p *Pending) add() {
	p.n.Add(1)
	p.changed()
}

// sub decrements, clamped at zero.
func (p *Pending) sub() {
	for {
		v := p.n.Load()
		if v <= 0 {
			return
		}
		if p.n.CompareAndSwap(v, v-1) {
			p.changed()
			return
		}
	}
}

func (p *Pending) changed() {
	if p.onChange != nil {
		p.onChange()
	}
}

// A Tracker links one delivered message back to the listener it came from.
// Receivers attach one to every message's context; batching stages use it
// through EnterBatch. Messages published in-process carry none.
type Tracker struct {
	pending *Pending
	detach  func()
	state   atomic.Int32 // 0 delivered, 1 in a batch, 2 settled
}

// NewTracker returns a tracker counting against pending. detach (may be nil)
// is called once when the message enters a batch: the receiver frees the
// message's concurrency permit, because the message now counts as batch
// pending instead of in flight.
func NewTracker(pending *Pending, detach func()) *Tracker {
	return &Tracker{pending: pending, detach: detach}
}

type trackerKey struct{}

// WithTracker returns ctx carrying t.
func WithTracker(ctx context.Context, t *Tracker) context.Context {
	return context.WithValue(ctx, trackerKey{}, t)
}

// TrackerFrom returns the tracker in ctx, or nil.
func TrackerFrom(ctx context.Context) *Tracker {
	t, _ := ctx.Value(trackerKey{}).(*Tracker)
	return t
}

// EnterBatch records that msg entered a batching stage: its listener's
// pending count goes up by one and its concurrency permit is freed. The
// returned settle function must be called when the member's batch ends
// (success, failure, discard or shutdown); the first call decrements the
// count, later calls are no-ops. For a message that did not come from a
// listener, or that already entered a batch, EnterBatch returns a no-op.
func EnterBatch(msg *message.Message) (settle func()) {
	t := TrackerFrom(msg.Context())
	if t == nil || !t.state.CompareAndSwap(0, 1) {
		return func() {}
	}
	t.pending.add()
	if t.detach != nil {
		t.detach()
	}
	return t.settle
}

func (t *Tracker) settle() {
	if t.state.CompareAndSwap(1, 2) {
		t.pending.sub()
	}
}
