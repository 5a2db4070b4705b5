// Package coalesce batches concurrent calls into group commits. It is
// Berth's one coalescer: SQL settlement (package sqlqueue) and SQS
// settlement (package sqs) both use it, each with its policy.
//
// A Coalescer turns many concurrent Do calls into few flushes, under one of
// two policies:
//
//   - The leader policy (New, NewLinger): the first caller on an idle
//     coalescer flushes its own item at once (no added latency when idle),
//     or after a short linger; callers that arrive while a flush is in
//     flight queue up, and when it returns, one of them leads the next flush
//     with everything queued (up to a maximum batch). One flush at a time,
//     run by the callers' own goroutines; no timer outside the linger. It
//     suits a database, where a second concurrent statement would contend
//     with the first.
//   - The timer policy (NewTimer): a batch goes when it holds the maximum
//     batch, or when its first item has waited the linger, on a goroutine of
//     the coalescer's own; any number of batches may be in flight at once.
//     It suits a remote API billed per request, where concurrent requests
//     cost nothing extra but every partial batch does.
//
// Each caller gets its own item's outcome; a flush that panics fails its
// batch with an error instead of taking the process down.
package coalesce

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("coalesce: closed")

// A Coalescer groups items of concurrent Do calls into batched flushes.
type Coalescer[T any] struct {
	flush    func(ctx context.Context, items []T) []error
	maxBatch int
	linger   time.Duration
	lull     time.Duration // ≥ linger: no lull
	arrived  chan struct{} // buffered 1: an item queued while the leader lingers

	mu        sync.Mutex
	queue     []*waiter[T]
	busy      bool
	lingering bool          // the leader is in lingerFor: signal arrived
	idle      chan struct{} // closed when !busy; replaced when a flush starts
	closed    bool

	timed *timed // the timer policy; nil for the leader policy

	// waiters recycles the leader policy's waiters with their channels:
	// three allocations per Do were a tenth of a PostgreSQL drain's
	// allocations (two Do calls per message, begin and complete).
	waiters sync.Pool
}

type waiter[T any] struct {
	item    T
	cb      func(error)   // DoAsync's: called with the outcome instead of done
	done    chan error    // buffered 1: the item's outcome
	lead    chan struct{} // buffered 1: lead the next flush
	leading bool          // guarded by mu
}

// New returns a coalescer that calls flush with at most maxBatch items
// (maxBatch < 1 means 1). flush must return nil (every item succeeded) or
// one error per item, in order. Its context carries the values of the
// leading caller's context but never its cancellation; flush bounds its own
// work (a statement timeout).
func New[T any](flush func(ctx context.Context, items []T) []error, maxBatch int) *Coalescer[T] {
	idle := make(chan struct{})
	close(idle)
	return &Coalescer[T]{flush: flush, maxBatch: max(maxBatch, 1), idle: idle, arrived: make(chan struct{}, 1)}
}

// NewLinger is New with a linger: the first item after an idle period waits
// up to linger for others to share its flush, trading that much latency for
// fewer round trips when items arrive close together but not at once. The
// wait ends early when maxBatch items have queued, or at a lull: when no
// item has joined for DefaultLull (or linger, if shorter). Items arriving
// while a flush is in flight queue as with New, without lingering.
//
// The lull matters when the callers are few: with 16 callers that each
// come back only after their item's flush (a receiver's concurrency
// permits), a linger that waited for maxBatch would delay every flush by
// the whole linger; measured on PostgreSQL, 16 permits and a 1 ms handler
// drained 1,200 msg/s with a 5 ms linger and 300 with 25 ms.
func NewLinger[T any](flush func(ctx context.Context, items []T) []error, maxBatch int, linger time.Duration) *Coalescer[T] {
	return NewLingerLull(flush, maxBatch, linger, DefaultLull)
}

// NewLingerLull is NewLinger with the lull given (at most linger; zero or
// less means the linger ends only when it is over or the batch is full).
func NewLingerLull[T any](flush func(ctx context.Context, items []T) []error, maxBatch int, linger, lull time.Duration) *Coalescer[T] {
	c := New(flush, maxBatch)
	c.linger = max(linger, 0)
	c.lull = c.linger
	if lull > 0 {
		c.lull = min(lull, c.linger)
	}
	return c
}

// DefaultLull is how long a lingering flush waits for the next item before
// it gives up on more company.
const DefaultLull = time.Millisecond

// Do submits item and waits for the outcome of the flush that carries it.
// If ctx is done while the item is still queued, Do withdraws it and returns
// ctx.Err(); once its flush has started, Do waits for its outcome.
//
// Under the timer policy the item is flushed even when ctx ends first: Do
// returns ctx.Err() at once, and the outcome is lost.
func (c *Coalescer[T]) Do(ctx context.Context, item T) error {
	if c.timed != nil {
		return c.doTimed(ctx, item)
	}
	w := c.newWaiter(item)
	if err := c.submit(ctx, w); err != nil {
		return err
	}
	cancelled := ctx.Done()
	for {
		select {
		case err := <-w.done:
			c.putWaiter(w)
			return err
		case <-w.lead:
			c.lead(ctx)
		case <-cancelled:
			c.mu.Lock()
			if !w.leading {
				for i, q := range c.queue {
					if q == w {
						c.queue = append(c.queue[:i:i], c.queue[i+1:]...)
						c.mu.Unlock()
						c.putWaiter(w)
						return ctx.Err()
					}
				}
			}
			c.mu.Unlock()
			// In flight, or chosen to lead: see it through.
			cancelled = nil
		}
	}
}

// DoAsync submits item and returns without waiting for its outcome, which
// goes to done, called exactly once: by the goroutine that flushes the item
// (the caller's own, before DoAsync returns, when the coalescer was idle;
// another caller's otherwise), or at once with ErrClosed after Close. done
// runs on the flushing goroutine before the next flush starts, so it must
// be quick; a panic in it is recovered and ignored. The item is never
// withdrawn: ctx only carries values to the flush.
//
// An asynchronous item frees its caller while its flush runs: in a drain
// that acks every message, a caller parked per ack until its group commit
// returned was a goroutine switch and a select per message. Under the
// leader policy, the caller that leads a flush goes on leading while the
// next queued item is an asynchronous one, since nobody waits to take the
// lead; under the timer policy, DoAsync waits for the outcome on a
// goroutine of its own.
func (c *Coalescer[T]) DoAsync(ctx context.Context, item T, done func(error)) {
	if c.timed != nil {
		go func() { callBack(done, c.doTimed(ctx, item)) }()
		return
	}
	w := c.newWaiter(item)
	w.cb = done
	if err := c.submit(ctx, w); err != nil {
		callBack(done, err)
	}
}

// submit queues w (leader policy). When the coalescer was idle, the caller
// leads: it lingers, then runs flushes until lead hands the lead on or the
// queue is empty. After Close it recycles w and returns ErrClosed.
func (c *Coalescer[T]) submit(ctx context.Context, w *waiter[T]) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.putWaiter(w)
		return ErrClosed
	}
	c.queue = append(c.queue, w)
	if c.busy {
		signal := c.lingering
		c.mu.Unlock()
		if signal {
			select {
			case c.arrived <- struct{}{}:
			default:
			}
		}
		return nil
	}
	c.busy = true
	c.idle = make(chan struct{})
	w.leading = true
	c.mu.Unlock()
	c.lingerFor()
	c.lead(ctx)
	return nil
}

// callBack calls done with err; a panic in done is ignored.
func callBack(done func(error), err error) {
	defer func() { _ = recover() }()
	done(err)
}

// newWaiter returns a waiter for item, recycled when one is free. A waiter
// is put back only when nothing refers to it any more and its channels are
// empty: after its outcome was received (its lead, if it led, was received
// before: a waiter leads the flush that carries its own item), after Close
// refused it, or after it was withdrawn from the queue (never chosen to
// lead, so nothing was or will be sent to it). deliver touches each waiter
// of a batch once, so one that returns while deliver goes on is no longer
// referred to.
func (c *Coalescer[T]) newWaiter(item T) *waiter[T] {
	if w, ok := c.waiters.Get().(*waiter[T]); ok {
		w.item = item
		return w
	}
	return &waiter[T]{item: item, done: make(chan error, 1), lead: make(chan struct{}, 1)}
}

func (c *Coalescer[T]) putWaiter(w *waiter[T]) {
	var zero T
	w.item, w.cb, w.leading = zero, nil, false
	c.waiters.Put(w)
}

// lingerFor waits the linger (if any) before the first flush after idle,
// ending early when a full batch has queued or at a lull.
func (c *Coalescer[T]) lingerFor() {
	if c.linger <= 0 {
		return
	}
	select { // a stale signal from an earlier linger
	case <-c.arrived:
	default:
	}
	c.mu.Lock()
	c.lingering = true
	full := len(c.queue) >= c.maxBatch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.lingering = false
		c.mu.Unlock()
	}()
	if full {
		return
	}
	deadline := time.NewTimer(c.linger)
	defer deadline.Stop()
	var lullC <-chan time.Time // nil without a lull
	var lull *time.Timer
	if c.lull < c.linger {
		lull = time.NewTimer(c.lull)
		defer lull.Stop()
		lullC = lull.C
	}
	for {
		select {
		case <-deadline.C:
			return
		case <-lullC:
			return
		case <-c.arrived:
			c.mu.Lock()
			full := len(c.queue) >= c.maxBatch
			c.mu.Unlock()
			if full {
				return
			}
			if lull != nil {
				lull.Reset(c.lull)
			}
		}
	}
}

// lead runs flushes for as long as the caller leads: until the queue is
// empty, or its head is a Do caller, which is handed the lead.
func (c *Coalescer[T]) lead(ctx context.Context) {
	for c.run(ctx) {
	}
}

// run flushes one batch from the head of the queue, delivers the outcomes,
// and hands leadership to the next queued caller, if any. It reports true
// when the next queued item is a DoAsync one: its caller does not wait,
// so the goroutine that ran this flush leads the next.
func (c *Coalescer[T]) run(ctx context.Context) bool {
	c.mu.Lock()
	n := min(len(c.queue), c.maxBatch)
	batch := make([]*waiter[T], n)
	copy(batch, c.queue)
	c.queue = append(c.queue[:0:0], c.queue[n:]...)
	c.mu.Unlock()

	items := make([]T, n)
	for i, w := range batch {
		items[i] = w.item
	}
	c.deliver(batch, c.safeFlush(context.WithoutCancel(ctx), items))

	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.busy = false
		close(c.idle)
		return false
	}
	next := c.queue[0]
	next.leading = true
	if next.cb != nil {
		return true
	}
	next.lead <- struct{}{}
	return false
}

// deliver hands each waiter of batch its outcome from errs: nil (all
// succeeded), one error per item, or one error for all. A DoAsync waiter's
// callback is called, and the waiter recycled.
func (c *Coalescer[T]) deliver(batch []*waiter[T], errs []error) {
	for i, w := range batch {
		var err error
		switch {
		case len(errs) == len(batch):
			err = errs[i]
		case len(errs) != 0:
			err = errs[0]
		}
		if cb := w.cb; cb != nil {
			c.putWaiter(w)
			callBack(cb, err)
			continue
		}
		w.done <- err
	}
}

func (c *Coalescer[T]) safeFlush(ctx context.Context, items []T) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			err := errors.New("coalesce: flush panicked")
			if e, ok := p.(error); ok {
				err = errors.Join(err, e)
			}
			errs = []error{err}
		}
	}()
	return c.flush(ctx, items)
}

// Close refuses new items and waits until everything queued has been
// flushed, or ctx is done. Queued items are flushed with their leaders'
// contexts stripped of cancellation, so a cancelled shutdown context does not
// fail the final flush. Close is idempotent.
//
// Under the timer policy Close sends what is waiting at once, without
// lingering, and waits for every batch in flight; when ctx ends first it
// cancels their flushes' context, waits for them to return, and returns
// ctx.Err().
func (c *Coalescer[T]) Close(ctx context.Context) error {
	if c.timed != nil {
		return c.closeTimed(ctx)
	}
	c.mu.Lock()
	c.closed = true
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Queued returns the number of items waiting for a flush (not counting the
// batch in flight).
func (c *Coalescer[T]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}
