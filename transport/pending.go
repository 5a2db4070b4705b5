package transport

import (
	"context"
	"sync"
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
	hooks   BatchHooks
	state   atomic.Int32 // 0 delivered, 1 in a batch, 2 settled

	// Set by NewMessageContext: the message context and its cancel.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	drop      func() // JoinBatch's, until it runs or is stopped
	cancelled bool   // Cancel was called

	nackReason atomic.Pointer[string] // SetNackReason's, for the dead-letter reason
}

// BatchHooks tell a receiver when one of its messages enters a batching
// stage and when that batch has ended, so it can stop watching the message
// while a batch holds it.
type BatchHooks interface {
	// EnteredBatch is called once, by EnterBatch, when the message enters
	// a batch: the message now counts as batch pending, not in flight. It
	// must not block.
	EnteredBatch()
	// LeftBatch is called once, by the settle function EnterBatch
	// returned, after the pending count was settled and before the stage
	// acks or nacks the message (or hands its outcome to whoever will). It
	// must not block.
	LeftBatch()
}

// NewTracker returns a tracker counting against pending. detach (may be nil)
// is called once when the message enters a batch: the receiver frees the
// message's concurrency permit, because the message now counts as batch
// pending instead of in flight.
func NewTracker(pending *Pending, detach func()) *Tracker {
	t := &Tracker{pending: pending}
	if detach != nil {
		t.hooks = detachFunc(detach)
	}
	return t
}

// detachFunc adapts NewTracker's detach function to BatchHooks.
type detachFunc func()

func (f detachFunc) EnteredBatch() { f() }
func (detachFunc) LeftBatch()      {}

// NewMessageContext returns a message context for a delivered message: a
// cancellable child of parent carrying a tracker counting against pending,
// which calls hooks (may be nil). Cancel the context with the tracker's
// Cancel: a batching stage that joined the message with JoinBatch then
// learns it without a context.AfterFunc registration.
func NewMessageContext(parent context.Context, pending *Pending, hooks BatchHooks) (context.Context, *Tracker) {
	c := &trackerCtx{Context: parent, t: Tracker{pending: pending, hooks: hooks}}
	t := &c.t
	t.ctx, t.cancel = context.WithCancel(c)
	return t.ctx, t
}

// trackerCtx is WithTracker's context and the tracker in one allocation.
type trackerCtx struct {
	context.Context
	t Tracker
}

func (c *trackerCtx) Value(key any) any {
	if key == (trackerKey{}) {
		return &c.t
	}
	return c.Context.Value(key)
}

// Cancel cancels the context NewMessageContext returned and runs, in its
// own goroutine, the drop function of the batching stage holding the
// message, if any. Cancel may be called more than once. It does nothing for
// a tracker NewTracker made.
func (t *Tracker) Cancel() {
	if t.cancel == nil {
		return
	}
	t.cancel()
	t.mu.Lock()
	drop := t.drop
	t.drop, t.cancelled = nil, true
	t.mu.Unlock()
	if drop != nil {
		go drop()
	}
}

// watch registers drop to run when Cancel is called (at once, in its own
// goroutine, if it already was). It reports false, registering nothing, if
// ctx may be done without Cancel (a context derived from the message
// context, with its own cancellation) or a drop is already registered.
func (t *Tracker) watch(ctx context.Context, drop func()) bool {
	if t.cancel == nil || ctx.Done() != t.ctx.Done() {
		return false
	}
	t.mu.Lock()
	if t.drop != nil {
		t.mu.Unlock()
		return false
	}
	if t.cancelled {
		t.mu.Unlock()
		go drop()
		return true
	}
	t.drop = drop
	t.mu.Unlock()
	return true
}

// stopDrop unregisters the drop function; it reports whether it did so
// before the function was started.
func (t *Tracker) stopDrop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.drop == nil {
		return false
	}
	t.drop = nil
	return true
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
// (success, failure, discard or shutdown), before the member is acked or
// nacked: a Berth receiver does not watch a message for its ack while a
// batch holds it, and starts again when settle is called. The first call
// decrements the count, later calls are no-ops. For a message that did not
// come from a listener, or that already entered a batch, EnterBatch returns
// a no-op.
func EnterBatch(msg *message.Message) (settle func()) {
	t := TrackerFrom(msg.Context())
	if t == nil || !t.state.CompareAndSwap(0, 1) {
		return func() {}
	}
	t.pending.add()
	if t.hooks != nil {
		t.hooks.EnteredBatch()
	}
	return t.settle
}

// JoinBatch is EnterBatch for a stage that takes a member out of its batch
// when the member's message context is done: drop runs once, in its own
// goroutine, when msg's context is done (at once if it already is), unless
// stop was called first; stop reports whether it prevented drop from
// running, as context.AfterFunc's does. For a message whose context is the
// one NewMessageContext made (values added on top are fine), the tracker
// runs drop when the receiver cancels it, without a context.AfterFunc
// registration; a message context that is never done never runs drop.
func JoinBatch(msg *message.Message, drop func()) (settle func(), stop func() bool) {
	ctx := msg.Context()
	t := TrackerFrom(ctx)
	settle = EnterBatch(msg)
	if t != nil && t.watch(ctx, drop) {
		return settle, t.stopDrop
	}
	if ctx.Done() == nil {
		return settle, neverRuns
	}
	return settle, context.AfterFunc(ctx, drop)
}

func neverRuns() bool { return true }

func (t *Tracker) settle() {
	if t.state.CompareAndSwap(1, 2) {
		t.pending.sub()
		if t.hooks != nil {
			t.hooks.LeftBatch()
		}
	}
}
