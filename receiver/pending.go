package receiver

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/handlertx"
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
	watch     watchState // the tracker's one watch (see watchCancel)
	drop      func()     // the watch's drop while watchActive
	cancelled bool       // Cancel was called

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
	switch key {
	case trackerKey{}:
		return &c.t
	case handlertx.Key{}:
		// The delivery's handler transaction (transport.TxFromContext).
		if b, ok := c.t.hooks.(handlertx.Binder); ok {
			return b
		}
	}
	return c.parent.Value(key)
}

// Cancel cancels the context NewMessageContext returned and runs, in its
// own goroutine, the drop function of the batching stage holding the
// message, if any. Cancel may be called more than once.
func (t *Tracker) Cancel() {
	t.cancel()
	t.mu.Lock()
	var drop func()
	if t.watch == watchActive {
		drop = t.drop
		t.watch, t.drop = watchEnded, nil
	}
	t.cancelled = true
	t.mu.Unlock()
	if drop != nil {
		go drop()
	}
}

// watchState is the life of a tracker's one watch: a drop function
// registered by watchCancel for Cancel to run. It only moves forward, so
// the watch's stop function, however late it is called, can only end this
// watch: a later JoinBatch of the same message (a second batching stage)
// is watched with context.AfterFunc instead.
type watchState uint8

const (
	watchNone   watchState = iota // never registered
	watchActive                   // Cancel will run drop
	watchEnded                    // drop was started or stopped
)

// endsOnlyByCancel reports whether Cancel is the only way ctx can be done:
// the message context's parent is never done, and ctx is the message
// context itself or derives from it through values only. A context
// derived with a cancellation of its own (a router Timeout middleware's, a
// cancellable context an Observer returned from Delivering) closes a Done
// channel of its own, so its channel differs from the message context's;
// a values-only context (the router's handler values, a span) returns its
// parent's. This is how the context package itself recognises that a
// context is one of its own cancel contexts (parentCancelCtx); it costs no
// allocation, where a context.AfterFunc per batch member costs 368 B of
// heap (receiver's JoinBatch alone, measured with 100,000 held members).
func (t *Tracker) endsOnlyByCancel(ctx context.Context) bool {
	return t.ownsDone && ctx.Done() == t.ctx.Done()
}

// watchCancel registers the tracker's one watch: drop runs, in its own
// goroutine, when Cancel is called (at once if it already was). It returns
// false, registering nothing, if the tracker had a watch already; then the
// caller watches the context itself.
func (t *Tracker) watchCancel(drop func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.watch != watchNone {
		return false
	}
	if t.cancelled {
		t.watch = watchEnded
		go drop()
		return true
	}
	t.watch, t.drop = watchActive, drop
	return true
}

// stopWatch ends the watch; it reports whether it did so before Cancel
// started the drop, as context.AfterFunc's stop does.
func (t *Tracker) stopWatch() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.watch != watchActive {
		return false
	}
	t.watch, t.drop = watchEnded, nil
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
// running, as context.AfterFunc's does. For a message whose context only
// the receiver's Cancel can end (the one NewMessageContext made, values
// added on top are fine), drop is a watch registered with the tracker,
// without a context.AfterFunc registration; a context with a cancellation
// of its own (a timeout, a cancellable observer context) is watched with
// context.AfterFunc, and one that is never done never runs drop.
func JoinBatch(msg *message.Message, drop func()) (settle func(), stop func() bool) {
	ctx := msg.Context()
	t := TrackerFrom(ctx)
	settle = EnterBatch(msg)
	if t != nil && t.endsOnlyByCancel(ctx) && t.watchCancel(drop) {
		return settle, t.stopWatch
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
