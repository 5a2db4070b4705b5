package receiver

import (
	"context"
	"fmt"

	"github.com/berth-go/berth/internal/wait"
)

// ReleaseBuffered implements pipe.
func (r *stage) ReleaseBuffered(ctx context.Context) error {
	r.mu.Lock()
	ds := r.buf
	r.buf = nil
	r.mu.Unlock()
	if len(ds) == 0 {
		return nil
	}
	r.changed()
	r.release(ds)
	return ctx.Err()
}

// Close stops the stage. Buffered deliveries are released at once;
// in-flight messages may be settled until ctx is done. Then Close gives up:
// every message still in flight, those batches hold included (their
// contexts are cancelled, so the batch discards them), is handed back for
// redelivery, and Close returns an error wrapping ctx.Err(). Handing back
// runs at most Config.CloseGrace past ctx: then every call to the source is
// cancelled and Close returns without waiting for the rest (a consumer that
// stopped reading the channel never holds it). Close is idempotent; later
// calls wait for the first and return its result.
func (r *stage) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.halt()
		_ = r.ReleaseBuffered(ctx)
		if err := wait.Group(ctx, &r.workers); err != nil {
			r.closeErr = r.giveUp(ctx, err)
		}
		close(r.renewStop)
		r.renewWG.Wait()
		close(r.done)
		r.changed()
	})
	<-r.done
	return r.closeErr
}

// giveUp hands back every message still in flight, within CloseGrace, and
// returns the error Close reports.
func (r *stage) giveUp(ctx context.Context, cause error) error {
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.CloseGrace)
	defer cancel()
	stopCalls := context.AfterFunc(grace, r.settleCancel)
	defer stopCalls()
	n := r.holdingCount()
	r.abandoned.Store(true)
	close(r.abandon)
	r.handBackBatched()
	if err := wait.Group(grace, &r.workers); err != nil {
		// The grace is over: cancel the calls now. The AfterFunc above may
		// not have run yet, and the deferred stopCalls would then keep it
		// from ever running, leaving a hung call to the source (and its
		// goroutine) behind for good.
		r.settleCancel()
		return fmt.Errorf("berth: closing: %d in-flight messages handed back unsettled, some not within CloseGrace (%s): %w",
			n, r.cfg.CloseGrace, cause)
	}
	return fmt.Errorf("berth: closing: %d in-flight messages handed back unsettled: %w", n, cause)
}

// handBackBatched hands back every flight a batch holds.
func (r *stage) handBackBatched() {
	r.mu.Lock()
	fs := make([]*flight, 0, len(r.holding))
	for _, f := range r.holding {
		fs = append(fs, f)
	}
	r.mu.Unlock()
	for _, f := range fs {
		if f.takeBatched() {
			f.handBack()
		}
	}
}
