package sqlqueue

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// Acks that ride on claims.
//
// At light load a message costs a claim and an ack, each a statement and a
// server transaction of its own: the ack's DELETE goes out alone a settle
// linger after the handler returned, and the next claim follows when the
// next wake-up arrives. A dialect that is an AckRider can carry the ack in
// the claim statement instead (a data-modifying CTE), so while the flow is
// light an ack waits up to SubscriberConfig.AckHold for the source's next
// claim and goes with it; only when no claim comes in time does it go
// alone, as before.
//
// An ack waits only while waiting costs nothing else. It holds a settle
// slot (or its concurrency permit, when no slot is free) until its
// statement ends, so it waits only when the source's last claim came back
// short or empty (the loop is answering wake-ups, not draining a backlog,
// so permits and slots are plentiful) and no row
// this source fetched is waiting in the buffer for a permit (fetched
// counts those). Otherwise it takes the group-committed Complete path, and
// a claim statement still takes along whatever acks are waiting.
//
// The guarantees are Complete's: the DELETE is fenced on owner and
// StateProcessing, each ack learns whether its row was touched
// (ErrLeaseLost otherwise), and a claim run again after a transient error
// reads the acks the first run deleted as lost, as a Complete run again
// does.

// An AckRider is a DirectDialect whose claim statement can also delete
// acknowledged rows.
type AckRider interface {
	DirectDialect
	// ClaimComplete is ClaimDirect (direct may be 0: every row fetched)
	// that also deletes the done rows as Complete does (fenced on owner and
	// StateProcessing), in the same statement. Besides ClaimDirect's rows
	// it returns one row per deleted row: its id, state StateAcked, the
	// other columns empty (uuid '', headers and body NULL, attempts 0).
	// Claiming sees the table as it was before the deletes (one snapshot),
	// so a keyed row whose head it deletes is not claimable by it.
	ClaimComplete(q Queue, owner int64, n, direct int, fetchTimeout, lease time.Duration, done []Ref) Stmt
}

// StateAcked is the state an AckRider's claim statement reports for a row
// it deleted; no row of a queue table is ever in it.
const StateAcked = -1

// DefaultAckHold is how long, at most, an ack waits for the next claim
// statement to carry it (SubscriberConfig.AckHold).
const DefaultAckHold = 50 * time.Millisecond

// rider is a source's acks waiting for a claim statement.
type rider struct {
	s    *Source
	hold time.Duration

	mu      sync.Mutex
	waiting []*ridingAck
	timer   *time.Timer // the oldest waiting ack's deadline; nil when none waits
	closed  bool
	flushes sync.WaitGroup // acks sent alone, by the timer or a full batch
}

type ridingAck struct {
	d    *transport.Delivery
	done chan error // buffered 1
}

// holdable reports whether an ack may wait for the next claim: the last
// claim came back short or empty and no fetched row waits for a permit.
func (s *Source) holdable() bool {
	return s.rider != nil && (s.short.Load() || s.w.idle.Load()) && s.fetched.Load() <= 0
}

// ride makes d's ack wait for the next claim statement, at most the hold;
// then it goes alone. ok is false when the rider is closed: use Complete's
// coalescer.
func (r *rider) ride(ctx context.Context, d *transport.Delivery) (err error, ok bool) {
	a := &ridingAck{d: d, done: make(chan error, 1)}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, false
	}
	r.waiting = append(r.waiting, a)
	switch {
	case len(r.waiting) >= r.s.cfg.SettleBatch:
		r.flushLocked()
	case r.timer == nil:
		r.timer = time.AfterFunc(r.hold, r.expire)
	}
	r.mu.Unlock()
	if h := handleOf(d); h.key != "" {
		// The key's next row waits for this ack: claim it now, with the
		// ack riding (handoff.go), rather than after the hold.
		r.s.freeKey([]string{h.key}, []int64{h.ref.ID})
	}
	select {
	case err := <-a.done:
		return err, true
	case <-ctx.Done():
	}
	r.mu.Lock()
	for i, x := range r.waiting {
		if x == a {
			r.waiting = append(r.waiting[:i:i], r.waiting[i+1:]...)
			r.mu.Unlock()
			return ctx.Err(), true
		}
	}
	r.mu.Unlock()
	return <-a.done, true // taken by a statement: see it through
}

// take removes up to max waiting acks for a claim statement to carry.
func (r *rider) take(max int) []*ridingAck {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(len(r.waiting), max)
	out := r.waiting[:n:n]
	r.waiting = append([]*ridingAck(nil), r.waiting[n:]...)
	if len(r.waiting) == 0 && r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	return out
}

// expire is the hold's timer: the waiting acks go alone.
func (r *rider) expire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	r.flushLocked()
}

// flushLocked sends every waiting ack alone, on a goroutine the rider
// waits for at close. r.mu must be held.
func (r *rider) flushLocked() {
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	as := r.waiting
	r.waiting = nil
	if len(as) == 0 {
		return
	}
	r.flushes.Add(1)
	go func() {
		defer r.flushes.Done()
		r.alone(as)
	}()
}

// alone deletes as in Complete statements of their own.
func (r *rider) alone(as []*ridingAck) {
	for start := 0; start < len(as); start += r.s.cfg.SettleBatch {
		chunk := as[start:min(start+r.s.cfg.SettleBatch, len(as))]
		ds := make([]*transport.Delivery, len(chunk))
		for i, a := range chunk {
			ds[i] = a.d
		}
		var errs []error
		if p := guard.Call(func() { errs = r.s.flushComplete(context.Background(), ds) }); p != nil {
			errs = []error{p}
		}
		settle(chunk, errs)
	}
}

// close sends what waits and waits for the acks sent alone; later acks
// take Complete's coalescer.
func (r *rider) close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.flushLocked()
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.flushes.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sqlqueue: acks waiting for a claim: %w", ctx.Err())
	}
}

// settle hands each ack its outcome: nil errs means all succeeded, one
// error is everyone's, otherwise one per ack.
func settle(as []*ridingAck, errs []error) {
	for i, a := range as {
		var err error
		switch {
		case len(errs) == len(as):
			err = errs[i]
		case len(errs) != 0:
			err = errs[0]
		}
		a.done <- err
	}
}

// AcksWaiting returns the number of acks waiting for the source's next
// claim statement to carry them (SubscriberConfig.AckHold).
func (s *Source) AcksWaiting() int {
	if s.rider == nil {
		return 0
	}
	s.rider.mu.Lock()
	defer s.rider.mu.Unlock()
	return len(s.rider.waiting)
}
