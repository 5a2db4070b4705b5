package receiver

import (
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
			r.logError("lease renewal failed", err, watermill.LogFields{"count": len(ds)})
		}
	}
}
