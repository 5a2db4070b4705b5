package receiver

import (
	"errors"
	"slices"
	"strconv"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// dispatch waits for a delivery it may dispatch, then for a permit, and
// starts a worker on the oldest such delivery. It holds no permit while
// nothing is ready, so Reserve finds every idle permit free.
func (r *stage) dispatch() {
	defer r.workers.Done()
	defer func() {
		if p := recover(); p != nil {
			r.recordFault("dispatch", guard.PanicError(p))
		}
	}()
	for r.awaitReady() {
		select {
		case r.permits <- struct{}{}:
		case <-r.stop:
			return
		}
		d := r.take()
		if d == nil { // released meanwhile (Pause), or the stage stopped
			<-r.permits
			continue
		}
		r.startWorker(d)
	}
}

// startWorker processes d, which holds a permit, on a lingering worker if
// one waits, else on a new one.
func (r *stage) startWorker(d *transport.Delivery) {
	if r.idle.hand(d) { // the worker's own count now stands for d
		return
	}
	r.workers.Add(1)
	go r.work(d)
}

// work processes d and then, on the same permit, each delivery ready in
// the buffer when the one before is settled. When none is, it frees the
// permit and lingers (idleWorkers) for the dispatcher to hand it the next
// delivery. A permit thus goes from one delivery to the next without a
// hand-off to the dispatcher while the buffer has work, and a goroutine
// serves many deliveries: a new one per delivery started small and grew
// its stack again through the decode and the settlement calls (in a
// PostgreSQL drain, stack growth and goroutine starts were a fifth of the
// receiver's CPU).
//
// A worker whose delivery settles on a settle slot (its permit went to the
// next delivery when user code let go of the message) lingers the same way
// once the settlement is done, or at once when the source acks
// asynchronously (flight.completeAsync).
//
// A worker counts once in r.workers. While it processes, that count goes
// with the delivery's permit (to a flight that enters a batch, say, and
// then the worker exits); while it lingers, it is the worker's own.
func (r *stage) work(d *transport.Delivery) {
	m := newMailbox() // where it waits while it lingers
	for d != nil {
		switch r.process(d) {
		case keptPermit:
			d = r.next(m)
		case keptWorker:
			d = r.linger(m)
		default:
			return
		}
	}
}

// next returns the delivery to process next for a worker that holds a
// permit and a worker count: the buffered one ready next, taken on that
// permit, or else one the dispatcher hands over while the worker lingers
// without its permit. nil means the worker exits; it counts no more.
func (r *stage) next(m *mailbox) *transport.Delivery {
	r.mu.Lock()
	i := -1
	if !r.isStopped() {
		i = r.readyIndex(true)
	}
	if i >= 0 {
		d := r.remove(i)
		r.dispatched.Add(1)
		r.mu.Unlock()
		r.changed()
		return d
	}
	r.mu.Unlock()
	r.freePermit() // the count stays, now the lingering worker's own
	return r.linger(m)
}

// linger waits, with the worker's mailbox, for the dispatcher to hand a
// worker that holds no permit, only its worker count, the next delivery
// (idleWorkers). nil means the worker exits; it counts no more.
func (r *stage) linger(m *mailbox) *transport.Delivery {
	if d := r.idle.wait(m); d != nil {
		return d
	}
	r.workers.Done()
	return nil
}

// readyIndex returns the index of the buffered delivery to dispatch next,
// or -1 when there is none (the buffer is empty, or every buffered
// delivery waits for its key). With take, the delivery's key is marked
// busy (nextIndex); without, the buffer is only looked at. r.mu must be
// held.
func (r *stage) readyIndex(take bool) int {
	switch {
	case len(r.buf) == 0:
		return -1
	case r.seq == nil:
		return 0
	case take:
		return r.nextIndex()
	}
	for i, d := range r.buf {
		key := r.seq.SequenceKey(d)
		if _, busy := r.busy[key]; key == "" || !busy {
			return i
		}
	}
	return -1
}

// awaitReady waits until a buffered delivery may be dispatched; false
// means the stage stopped.
func (r *stage) awaitReady() bool {
	for {
		r.mu.Lock()
		i, stopped := r.readyIndex(false), r.isStopped()
		r.mu.Unlock()
		if stopped {
			return false
		}
		if i >= 0 {
			return true
		}
		select {
		case <-r.avail:
		case <-r.stop:
			return false
		}
	}
}

// take removes the buffered delivery to dispatch next, counting it in
// flight; nil when there is none or the stage stopped.
func (r *stage) take() *transport.Delivery {
	r.mu.Lock()
	if r.isStopped() {
		r.mu.Unlock()
		return nil
	}
	i := r.readyIndex(true)
	if i < 0 {
		r.mu.Unlock()
		return nil
	}
	d := r.remove(i)
	r.inflight.Add(1)
	r.dispatched.Add(1)
	r.mu.Unlock()
	r.changed()
	return d
}

// remove removes and returns r.buf[i]. r.mu must be held.
func (r *stage) remove(i int) *transport.Delivery {
	d := r.buf[i]
	if i == 0 {
		r.buf[0] = nil
		r.buf = r.buf[1:]
	} else {
		r.buf = slices.Delete(r.buf, i, i+1)
	}
	if len(r.buf) == 0 {
		r.buf = nil // let the backing array go
	}
	return d
}

// process runs one delivery through map, gate and delivery, then hands it
// to its flight. It holds a permit (and counts in workers) until a flight
// takes them over. It reports what came back to it when the flight ended
// (see work): the permit and the worker count, the worker count alone, or
// nothing (they were freed, or went with the flight into a batch).
func (r *stage) process(d *transport.Delivery) (k kept) {
	var f *flight // owns the permit and the worker count once set
	defer func() {
		if p := recover(); p != nil {
			r.recordFault("process", guard.PanicError(p))
			if f != nil && f.take() {
				f.tracker.Cancel()
				f.end(transport.OutcomeAbandoned)
			}
		}
		if f == nil {
			r.keyDone(d, false)
			r.freePermit()
			r.workers.Done()
		}
	}()

	// Map, then drop the raw payload.
	var msg *message.Message
	err := r.guarded("map", func() error {
		var err error
		msg, err = r.src.Map(d)
		return err
	})
	if r.isFaulted() {
		r.release([]*transport.Delivery{d}) // never reached user code
		return
	}
	if err != nil {
		r.deadLetter(d, nil, "cannot map message: "+err.Error())
		return
	}
	d.Raw = nil

	// The lease gate, unless the source claimed the delivery straight
	// into processing for this permit.
	if !d.Started && !r.gate(d, msg) {
		return
	}

	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	msg.Metadata.Set(transport.MetadataAttempt, strconv.Itoa(d.Attempt))
	if d.ID != "" {
		msg.Metadata.Set(transport.MetadataMessageID, d.ID)
	}
	f = r.newFlight(d, msg)
	if !r.out.send(msg, r.stop) {
		f.undelivered()
		return keptNothing
	}
	return f.watch(f.wake)
}

// gate runs the lease gate (Begin) and reports whether the delivery may go
// to user code.
func (r *stage) gate(d *transport.Delivery, msg *message.Message) bool {
	var err error
	ctx, cancel := r.callCtx()
	p := guard.Call(func() { err = r.src.Begin(ctx, d) })
	cancel()
	switch {
	case p != nil:
		// Begin panicked: fault, and hand the delivery back rather than
		// leave it to lease expiry (a lost lease makes the call a no-op).
		r.recordFault("begin", p)
		r.retry(d, msg, 0, "not delivered: the lease gate (Begin) panicked")
		return false
	case errors.Is(err, transport.ErrLeaseLost):
		r.logDebug("lease lost before processing; skipped", watermill.LogFields{"id": d.ID})
		return false
	case err != nil:
		r.logError("lease gate failed; the delivery is left to lease recovery", err, watermill.LogFields{"id": d.ID})
		return false
	}
	return true
}
