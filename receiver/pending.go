package receiver

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

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
// The stage attaches one to every message's context; batching stages use it
// through EnterBatch. Messages published in-process carry none.
type Tracker struct {
	pending *Pending
	hooks   BatchHooks
	state   atomic.Int32 // 0 delivered, 1 in a batch, 2 settled

	// Set by NewMessageContext: the message context and its cancel, and
	// whether Cancel is the only way it ends (its parent is never done).
	ctx      context.Context
	cancel   context.CancelFunc
	ownsDone bool

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

// NewMessageContext returns a message context for a delivered message: a
// cancellable child of parent carrying a tracker counting against pending,
// which calls hooks (may be nil). Cancel the context with the tracker's
// Cancel: a batching stage that joined the message with JoinBatch then
// learns it without a context.AfterFunc registration.
func NewMessageContext(parent context.Context, pending *Pending, hooks BatchHooks) (context.Context, *Tracker) {
	c := &trackerCtx{parent: parent, t: Tracker{pending: pending, hooks: hooks}}
	t := &c.t
	t.ownsDone = parent.Done() == nil
	t.ctx, t.cancel = context.WithCancel(c)
	return t.ctx, t
}

// trackerCtx is the message context's parent, with the tracker as a value,
// in one allocation. It adds nothing else to its parent.
type trackerCtx struct {
	parent context.Context
	t      Tracker
}

func (c *trackerCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *trackerCtx) Done() <-chan struct{}       { return c.parent.Done() }
func (c *trackerCtx) Err() error                  { return c.parent.Err() }

func (c *trackerCtx) Value(key any) any {
	if key == (trackerKey{}) {
		return &c.t
	}
	return c.parent.Value(key)
}

// Cancel cancels the context NewMessageContext returned and runs, in its
// own goroutine, the drop function of the batching stage holding the
// message, if any. Cancel may be called more than once.
func (t *Tracker) Cancel() {
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
// ctx may be done without Cancel (the message context's parent can be
// cancelled, or ctx is derived from the message context with a
// cancellation of its own: its Done channel is not the message context's)
// or a drop is already registered.
func (t *Tracker) watch(ctx context.Context, drop func()) bool {
	if !t.ownsDone || ctx.Done() != t.ctx.Done() {
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
