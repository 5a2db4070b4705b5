package coalesce

import (
	"context"
	"sync"
	"time"
)

// timed is the state of the timer policy.
type timed struct {
	timer   *time.Timer    // fires when the head of the queue has waited the linger
	gen     uint64         // batches dispatched: a timer of an older one does nothing
	flights sync.WaitGroup // batches in flight
	ctx     context.Context
	cancel  context.CancelFunc // ends ctx: Close gave up waiting
}

// NewTimer returns a coalescer with the timer policy: a batch is flushed
// when maxBatch items wait (maxBatch < 1 means 1), or linger after its first
// item arrived (at once when linger ≤ 0), on a goroutine of the
// coalescer's; batches do not wait for each other. flush must return nil
// (every item succeeded) or one error per item, in order. Its context is the
// coalescer's own, cancelled only when Close gives up waiting; flush bounds
// its own work otherwise.
//
// A full batch is what the callers can make: with n callers that each wait
// for their item's outcome before the next, a maxBatch above n would add the
// whole linger to every flush.
func NewTimer[T any](flush func(ctx context.Context, items []T) []error, maxBatch int, linger time.Duration) *Coalescer[T] {
	c := New(flush, maxBatch)
	c.linger = linger
	ctx, cancel := context.WithCancel(context.Background())
	c.timed = &timed{ctx: ctx, cancel: cancel}
	return c
}

// doTimed is Do under the timer policy.
func (c *Coalescer[T]) doTimed(ctx context.Context, item T) error {
	w := &waiter[T]{item: item, done: make(chan error, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.queue = append(c.queue, w)
	switch {
	case len(c.queue) >= c.maxBatch || c.linger <= 0:
		c.dispatchLocked()
	case len(c.queue) == 1:
		gen := c.timed.gen
		c.timed.timer = time.AfterFunc(c.linger, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.timed.gen == gen && len(c.queue) > 0 {
				c.dispatchLocked()
			}
		})
	}
	c.mu.Unlock()
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dispatchLocked flushes the whole queue (at most maxBatch items: it goes
// as soon as it is full) on a goroutine of its own. Called with c.mu held.
func (c *Coalescer[T]) dispatchLocked() {
	batch := c.queue
	c.queue = nil
	t := c.timed
	t.gen++
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.flights.Go(func() {
		items := make([]T, len(batch))
		for i, w := range batch {
			items[i] = w.item
		}
		c.deliver(batch, c.safeFlush(t.ctx, items))
	})
}

// closeTimed is Close under the timer policy.
func (c *Coalescer[T]) closeTimed(ctx context.Context) error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		if len(c.queue) > 0 {
			c.dispatchLocked()
		}
	}
	c.mu.Unlock()
	done := make(chan struct{})
	go func() {
		c.timed.flights.Wait()
		close(done)
	}()
	select {
	case <-done:
		c.timed.cancel()
		return nil
	case <-ctx.Done():
		c.timed.cancel()
		<-done
		return ctx.Err()
	}
}
