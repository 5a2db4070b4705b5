package receiver

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// A flight is one delivered message from delivery to settlement. Exactly one
// party settles it: the goroutine that takes it (take, takeBatched) acks,
// nacks or hands it back, then ends it.
//
// A goroutine watches a flight for its ack or nack, except while a batch
// holds the message: when it enters a batch (EnteredBatch), its permit is
// freed and the process goroutine exits, since a batch may hold a message far
// longer than a permit and a parked goroutine costs more than the message's
// metadata; when the batch ends (LeftBatch), an await goroutine watches for
// the ack or nack that follows. Close hands back the flights batches hold
// itself. A flight counts in stage.workers until it ends, so Close waits for
// it either way.
type flight struct {
	r       *stage
	d       *transport.Delivery
	msg     *message.Message
	tracker *Tracker                // its Cancel cancels the message context
	finish  func(transport.Outcome) // the observer's, or nil
	wake    chan struct{}           // closed when the message enters a batch
	acked   bool                    // the ack succeeded (set by the party that took it)
	ackedAt time.Time               // when an asynchronous ack started (completeAsync)
	ackDone atomic.Bool             // an asynchronous ack's outcome arrived
	htx     handlerTx               // the handler's transaction (tx.go)

	mu      sync.Mutex
	permit  bool // the concurrency permit is still held
	slot    bool // a settle slot is held instead (toSlot)
	batched bool // a batch holds the message: nobody watches it
	taken   bool // a party settles or hands back the message
	ended   bool
}

// newFlight builds the message context of a gated delivery and records the
// flight as held (its lease is renewed from now on).
func (r *stage) newFlight(d *transport.Delivery, msg *message.Message) *flight {
	f := &flight{r: r, d: d, msg: msg, wake: make(chan struct{}), permit: true}
	msgCtx, tracker := NewMessageContext(r.base, r.pending, f)
	f.tracker = tracker
	r.observe(func(o transport.Observer) { msgCtx, f.finish = o.Delivering(msgCtx, r.name, msg) })
	msg.SetContext(msgCtx)
	r.mu.Lock()
	r.holding[d] = f
	r.mu.Unlock()
	return f
}

// take claims a flight no batch holds; it reports false when another party
// has it.
func (f *flight) take() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ok := !f.taken && !f.batched
	f.taken = f.taken || ok
	return ok
}

// takeBatched claims a flight a batch holds, to hand it back.
func (f *flight) takeBatched() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ok := !f.taken && f.batched
	f.taken = f.taken || ok
	return ok
}

// watch waits for the message's ack or nack, for Close to give up, or for
// the message to enter a batch (wake; nil for the await goroutine), and
// settles it if it can take it. It reports what of the flight's permit,
// slot and worker count came back to it when it ended the flight
// (endKeep).
func (f *flight) watch(wake <-chan struct{}) kept {
	r := f.r
	taken := false
	defer func() {
		if p := recover(); p != nil {
			r.recordFault("process", guard.PanicError(p))
			if taken {
				f.tracker.Cancel()
				f.end(transport.OutcomeAbandoned)
			}
		}
	}()
	var (
		outcome transport.Outcome
		entered bool
	)
	for {
		select {
		case <-f.msg.Acked():
			outcome = transport.OutcomeAcked
		case <-f.msg.Nacked():
			outcome = transport.OutcomeNacked
		case <-r.abandon:
			outcome = transport.OutcomeAbandoned
		case <-wake:
			entered = true
		}
		if entered || outcome != transport.OutcomeNacked || wake == nil || !r.retriesInPlace(f.d, f.msg) {
			break
		}
		if f.committedTx() {
			break // CommitTx settled it: nothing to retry
		}
		// Concurrency 1: the process goroutine holds the only permit;
		// retry the message in place and watch it again.
		if again, k := f.again(); !again {
			taken = true // again took and ended it
			return k
		}
	}
	if taken = !entered && f.take(); !taken {
		// A batch holds it. If Close walked the batched flights before this
		// one entered its batch, hand it back here.
		if taken = r.abandoned.Load() && f.takeBatched(); taken {
			f.handBack()
		}
		return keptNothing
	}
	f.tracker.Cancel()
	tx, committed, cerr := f.settleTx(outcome == transport.OutcomeAcked)
	if committed {
		return f.endKeep(f.afterTx(cerr), wake != nil)
	}
	onSlot := outcome != transport.OutcomeAbandoned && f.toSlot()
	switch outcome {
	case transport.OutcomeAcked:
		if tx != nil {
			outcome = f.afterTx(r.completeTx(f.d, f.msg, tx))
			break
		}
		if r.async != nil && wake != nil && onSlot {
			f.completeAsync()
			return keptWorker
		}
		f.acked = r.complete(f.d, f.msg) == nil
	case transport.OutcomeNacked:
		outcome = r.nack(f.d, f.msg, f.tracker.NackReason())
	default:
		r.logDebug("closing: un-settled message handed back for redelivery", watermill.LogFields{"id": f.d.ID})
		r.retry(f.d, f.msg, 0, "abandoned: the subscriber closed before the handler settled it")
	}
	return f.endKeep(outcome, wake != nil)
}

// again retries the flight's nacked message in place (Config.RetryInPlace):
// the flight keeps its permit, so nothing behind it is dispatched, and its
// delivery stays held, so its lease is renewed. It waits the retry delay,
// checks the lease (one Renew of the delivery), then delivers a copy of
// the message with the attempt counted, under a new message context, and
// reports true: the caller watches it again. It reports false, with what
// endKeep handed back, when it took and ended the flight instead: the
// stage stopped during the wait (the message is handed back, Retry 0, as
// Close does), or the lease is gone (dropped without running user code
// again, as the lease gate does).
func (f *flight) again() (bool, kept) {
	r := f.r
	f.tracker.Cancel() // the nacked attempt's context ends
	f.rollbackTx(true) // the next attempt may begin its own
	if f.finish != nil {
		finish := f.finish
		f.finish = nil
		r.observe(func(transport.Observer) { finish(transport.OutcomeNacked) })
	}
	handBack := func() (bool, kept) {
		f.take()
		r.logDebug("closing: message waiting for an in-place retry handed back", watermill.LogFields{"id": f.d.ID})
		r.retry(f.d, f.msg, 0, f.tracker.NackReason())
		return false, f.endKeep(transport.OutcomeAbandoned, true)
	}
	if delay := r.cfg.RetryDelayFor(f.d.Attempt); delay > 0 {
		select {
		case <-r.cfg.Clock.After(delay):
		case <-r.stop:
			return handBack()
		}
	}
	if r.isStopped() {
		return handBack()
	}
	if r.renewer != nil {
		ctx, cancel := r.callCtx()
		err := r.guarded("renew", func() error { return r.renewer.Renew(ctx, []*transport.Delivery{f.d}) })
		cancel()
		switch {
		case errors.Is(err, transport.ErrLeaseLost):
			f.take()
			r.logDebug("lease lost while waiting for an in-place retry; dropped", watermill.LogFields{"id": f.d.ID})
			return false, f.endKeep(transport.OutcomeAbandoned, true)
		case r.isStopped():
			return handBack()
		case err != nil:
			// Not known to be lost: retry; the ack or nack will tell.
			r.logError("lease renewal before an in-place retry failed", err, watermill.LogFields{"id": f.d.ID})
		}
	}
	f.d.Attempt++
	msg := f.msg.Copy()
	msg.Metadata.Set(transport.MetadataAttempt, strconv.Itoa(f.d.Attempt))
	msgCtx, tracker := NewMessageContext(r.base, r.pending, f)
	r.observe(func(o transport.Observer) { msgCtx, f.finish = o.Delivering(msgCtx, r.name, msg) })
	msg.SetContext(msgCtx)
	f.msg, f.tracker = msg, tracker
	if !r.out.send(msg, r.stop) {
		return handBack()
	}
	return true, keptNothing
}

// retriesInPlace reports whether a nack of d retries it in place: the
// stage's config asks for it (Config.RetryInPlace) and the nack would not
// dead-letter it (its last attempt, or a keyed message under
// OrderedNackDeadLetter).
func (r *stage) retriesInPlace(d *transport.Delivery, msg *message.Message) bool {
	switch {
	case !r.inPlace:
		return false
	case r.cfg.OrderedNack == OrderedNackDeadLetter && r.keyed(d, msg):
		return false
	case r.cfg.MaxAttempts > 0 && d.Attempt >= r.cfg.MaxAttempts:
		return false
	}
	return true
}

// completeAsync acks a flight that settles on a settle slot without its
// process goroutine waiting for the outcome: that goroutine keeps its
// worker count (watch reports keptWorker) and goes on to the next
// delivery, while the flight counts in stage.workers on its own until the
// source calls ackSettled, which ends it and frees the slot. In a drain on
// PostgreSQL, each worker parked until its ack's group commit returned.
func (f *flight) completeAsync() {
	r := f.r
	r.workers.Add(1) // the flight's own, until ackSettled ends it
	ctx, cancel := r.callCtx()
	defer cancel()
	f.ackedAt = time.Now()
	if p := guard.Call(func() { r.async.CompleteAsync(ctx, f.d, f.ackSettled) }); p != nil {
		r.recordFault("ack", p)
		f.ackSettled(p) // unless the source called it before it panicked
	}
}

// ackSettled receives an asynchronous ack's outcome (completeAsync); only
// its first call counts.
func (f *flight) ackSettled(err error) {
	if !f.ackDone.CompareAndSwap(false, true) {
		return
	}
	r := f.r
	r.settled(transport.SettleAck, f.msg, 1, f.ackedAt, err)
	if err != nil {
		r.logError("ack failed; the message may be redelivered", err, watermill.LogFields{"id": f.d.ID})
	}
	f.acked = err == nil
	f.end(transport.OutcomeAcked)
}

// undelivered hands back a flight user code never saw (the stage stopped
// before the channel took it): released when it was claimed started (the
// source undoes the attempt its claim counted), else retried at once (its
// Begin counted the attempt, and Release is for deliveries never gated).
func (f *flight) undelivered() {
	f.take()
	f.tracker.Cancel()
	if f.d.Started {
		f.r.release([]*transport.Delivery{f.d})
	} else {
		f.r.retry(f.d, f.msg, 0, "not delivered: the subscriber stopped before the handler took it")
	}
	f.end(transport.OutcomeAbandoned)
}

// handBack settles a batched flight the stage gives up on (Close's deadline
// passed): its context is cancelled, so the batch discards it, and it is
// handed back for redelivery.
func (f *flight) handBack() {
	f.tracker.Cancel()
	f.rollbackTx(false)
	f.r.logDebug("closing: batched message handed back for redelivery", watermill.LogFields{"id": f.d.ID})
	f.r.retry(f.d, f.msg, 0, "abandoned: the subscriber closed before its batch settled it")
	f.end(transport.OutcomeAbandoned)
}

// end reports the outcome, forgets the flight and frees what it held. Only
// the party that took the flight calls it; a second call (after a panic
// inside the first) does nothing.
func (f *flight) end(outcome transport.Outcome) { _ = f.endKeep(outcome, false) }

// kept is what a flight's end hands back to its process goroutine.
type kept int

const (
	keptNothing kept = iota // freed, or gone with the flight into a batch: the goroutine exits
	keptPermit              // the permit and the worker count: the next delivery may take them
	keptWorker              // the worker count alone: the flight settled on a slot, now freed
)

// endKeep is end for the process goroutine (keep set): if the flight still
// holds its permit, the permit and the worker count pass to the caller
// instead of being freed (keptPermit), and the caller takes the next
// delivery on them or frees them (stage.next); if it settled on a settle
// slot, the slot is freed and the worker count passes (keptWorker).
func (f *flight) endKeep(outcome transport.Outcome, keep bool) kept {
	f.mu.Lock()
	ended := f.ended
	f.ended = true
	k := keptNothing
	if keep && !ended {
		switch {
		case f.permit:
			k, f.permit = keptPermit, false
		case f.slot:
			k = keptWorker
		}
	}
	f.mu.Unlock()
	if ended {
		return keptNothing
	}
	f.rollbackTx(false) // whatever is left open (a panic on the way)
	r := f.r
	if f.finish != nil {
		r.observe(func(transport.Observer) { f.finish(outcome) })
	}
	r.mu.Lock()
	delete(r.holding, f.d)
	r.mu.Unlock()
	r.keyDone(f.d, f.acked)
	f.freePermit() // the slot, for keptWorker; nothing left for keptPermit
	if k == keptNothing {
		r.workers.Done()
	}
	return k
}

func (f *flight) freePermit() {
	f.mu.Lock()
	held, slot := f.permit, f.slot
	f.permit, f.slot = false, false
	f.mu.Unlock()
	switch {
	case held:
		f.r.freePermit()
	case slot:
		f.r.inflight.Add(-1)
		<-f.r.settling
		f.r.changed()
	}
}

// toSlot moves a flight whose message user code has let go of from its
// permit to a free settle slot, and reports whether it did, so the permit goes to the next delivery
// while the ack or nack is settled. With every slot taken (settlements are
// slower than user code), the flight settles on its permit: user code then
// waits for the broker, and deliveries, permits and slots stay bounded. A
// flight without a permit (a batch freed it) takes no slot.
//
// It moves whether or not a delivery waits for the permit: a permit freed at
// the ack lets the buffer run dry between claims, and the next claim then
// finds the permits free and claims its rows straight into processing,
// skipping the lease gate's statement (docs/design-decisions.md).
func (f *flight) toSlot() bool {
	select {
	case f.r.settling <- struct{}{}:
	default:
		return false
	}
	f.mu.Lock()
	held := f.permit
	f.permit, f.slot = false, held
	f.mu.Unlock()
	if !held {
		<-f.r.settling
		return false
	}
	<-f.r.permits // still in flight: r.inflight counts it until it ends
	f.r.changed()
	return true
}

// EnteredBatch implements BatchHooks: the permit is freed and the process
// goroutine let go.
func (f *flight) EnteredBatch() {
	f.freePermit()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.taken && !f.batched {
		f.batched = true
		close(f.wake)
	}
}

// LeftBatch implements BatchHooks: an await goroutine watches for the ack or
// nack that follows.
func (f *flight) LeftBatch() {
	f.mu.Lock()
	rejoin := f.batched && !f.taken
	f.batched = false
	f.mu.Unlock()
	if rejoin {
		go f.watch(nil) // counted in workers until f ends
	}
}

// freePermit returns one concurrency permit.
func (r *stage) freePermit() {
	r.inflight.Add(-1)
	<-r.permits
	r.changed()
}
