package receiver

import (
	"errors"
	"slices"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// renew extends the leases of every held delivery once per interval, on the
// configured clock, until Close stops it.
func (r *stage) renew() {
	defer r.renewWG.Done()
	defer func() {
		if p := recover(); p != nil {
			r.recordFault("renew", guard.PanicError(p))
		}
	}()
	every := r.renewer.RenewInterval()
	for {
		select {
		case <-r.cfg.Clock.After(every):
		case <-r.renewStop:
			return
		}
		r.mu.Lock()
		ds := make([]*transport.Delivery, 0, len(r.holding))
		for d := range r.holding {
			ds = append(ds, d)
		}
		if r.seq != nil {
			// Buffered deliveries of a sequenced source may wait for their
			// key as long as a handler runs: keep them leased too.
			ds = append(ds, r.buf...)
		}
		r.mu.Unlock()
		if len(ds) == 0 {
			continue
		}
		ctx, cancel := r.callCtx()
		err := r.renewer.Renew(ctx, ds)
		cancel()
		if err != nil {
			r.renewFailed(ds, err)
		}
	}
}

// renewFailed reports a failed renewal of ds. The list was copied before
// the statement ran, so a delivery settled meanwhile (its row deleted by
// the ack) reads as lost: when every failure is a lost lease and no more
// of them were reported than deliveries settled since the copy, the
// renewal only raced those settlements, which is no error. A delivery
// still held whose lease is lost is one, and so is any other failure.
func (r *stage) renewFailed(ds []*transport.Delivery, err error) {
	lost, other := leaseLostLeaves(err)
	settled := 0
	r.mu.Lock()
	for _, d := range ds {
		if _, held := r.holding[d]; !held && !r.buffered(d) {
			settled++
		}
	}
	r.mu.Unlock()
	if other == 0 && lost <= settled {
		r.logDebug("lease renewal raced settlements: rows already settled read as lost", watermill.LogFields{"count": len(ds), "settled": settled})
		return
	}
	r.logError("lease renewal failed", err, watermill.LogFields{"count": len(ds)})
}

// buffered reports whether d waits in the buffer (renewed for a
// Sequencer). r.mu must be held.
func (r *stage) buffered(d *transport.Delivery) bool {
	return r.seq != nil && slices.Contains(r.buf, d)
}

// leaseLostLeaves counts the leaves of err (through errors.Join) that are
// lost leases, and the others.
func leaseLostLeaves(err error) (lost, other int) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			l, o := leaseLostLeaves(e)
			lost, other = lost+l, other+o
		}
		return lost, other
	}
	if errors.Is(err, transport.ErrLeaseLost) {
		return 1, 0
	}
	return 0, 1
}
