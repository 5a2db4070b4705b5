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

// dispatch takes a permit, then the oldest buffered delivery, and starts
// processing it.
func (r *stage) dispatch() {
	defer r.workers.Done()
	defer func() {
		if p := recover(); p != nil {
			r.recordFault("dispatch", guard.PanicError(p))
		}
	}()
	for {
		select {
		case r.permits <- struct{}{}:
		case <-r.stop:
			return
		}
		d := r.take()
		if d == nil {
			<-r.permits
			return
		}
		r.workers.Add(1)
		go r.process(d)
	}
}

// take waits for a buffered delivery; nil means the stage stopped.
func (r *stage) take() *transport.Delivery {
	for {
		r.mu.Lock()
		if r.isStopped() {
			r.mu.Unlock()
			return nil
		}
		i := 0
		if r.seq != nil && len(r.buf) > 0 {
			i = r.nextIndex() // -1: every buffered delivery waits for its key
		}
		if len(r.buf) > 0 && i >= 0 {
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
			r.inflight.Add(1)
			r.dispatched.Add(1)
			r.mu.Unlock()
			r.changed()
			return d
		}
		r.mu.Unlock()
		select {
		case <-r.avail:
		case <-r.stop:
			return nil
		}
	}
}

// process runs one delivery through map, gate and delivery, then hands it
// to its flight. It holds a permit (and counts in workers) until a flight
// takes them over.
func (r *stage) process(d *transport.Delivery) {
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

	// The lease gate.
	ctx, cancel := r.callCtx()
	p := guard.Call(func() { err = r.src.Begin(ctx, d) })
	cancel()
	switch {
	case p != nil:
		// Begin panicked: fault, and hand the delivery back rather than
		// leave it to lease expiry (a lost lease makes the call a no-op).
		r.recordFault("begin", p)
		r.retry(d, msg, 0)
		return
	case errors.Is(err, transport.ErrLeaseLost):
		r.logDebug("lease lost before processing; skipped", watermill.LogFields{"id": d.ID})
		return
	case err != nil:
		r.logError("lease gate failed; the delivery is left to lease recovery", err, watermill.LogFields{"id": d.ID})
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
		return
	}
	f.watch(f.wake)
}
