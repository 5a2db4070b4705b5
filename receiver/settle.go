package receiver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// callTimeout bounds each call the stage makes to its source (gate, ack,
// nack, release, dead-letter, renew) while it runs, so a hung broker call
// cannot hold a permit forever. It does not bound closing: every call's
// context is also cancelled once Close's grace has passed.
const callTimeout = 30 * time.Second

// callDeadlineShare is how long calls share one deadline context: a call's
// deadline is between callTimeout-callDeadlineShare and callTimeout away.
const callDeadlineShare = time.Second

// A callDeadline is the deadline context that the calls started within
// callDeadlineShare of its making share. A context.WithTimeout of its own
// per call started and stopped a runtime timer per settlement (in a
// PostgreSQL drain, a twentieth of the receiver's CPU); a shared one is
// never cancelled early (a call still using it would be cut short) and
// ends at its deadline, or with settleCtx.
type callDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc // never called: the deadline or settleCtx ends ctx
	until  int64              // UnixNano after which calls make a new one
}

// callDeadlines holds a stage's current callDeadline.
type callDeadlines struct {
	cur atomic.Pointer[callDeadline]
	mu  sync.Mutex // serialises making a new one
}

// callCtx returns the context of one call to the source. Its cancel
// function does nothing (see callDeadline); callers call it all the same.
func (r *stage) callCtx() (context.Context, context.CancelFunc) {
	now := time.Now().UnixNano()
	if c := r.deadlines.cur.Load(); c != nil && now < c.until {
		return c.ctx, noCancel
	}
	r.deadlines.mu.Lock()
	defer r.deadlines.mu.Unlock()
	if c := r.deadlines.cur.Load(); c != nil && now < c.until {
		return c.ctx, noCancel
	}
	ctx, cancel := context.WithTimeout(r.settleCtx, callTimeout)
	r.deadlines.cur.Store(&callDeadline{ctx: ctx, cancel: cancel, until: now + int64(callDeadlineShare)})
	return ctx, noCancel
}

func noCancel() {}

// settled reports a settlement call to the observer.
func (r *stage) settled(op transport.SettleOp, msg *message.Message, n int, start time.Time, err error) {
	r.observe(func(o transport.Observer) { o.Settled(r.name, op, msg, n, start, err) })
}

// release hands deliveries back to the broker untouched.
func (r *stage) release(ds []*transport.Delivery) {
	if len(ds) == 0 {
		return
	}
	ctx, cancel := r.callCtx()
	defer cancel()
	start := time.Now()
	err := r.guarded("release", func() error { return r.src.Release(ctx, ds) })
	r.settled(transport.SettleRelease, nil, len(ds), start, err)
	if err != nil {
		r.logError("release failed; the broker's lease expiry will return the deliveries", err,
			watermill.LogFields{"count": len(ds)})
	}
}

// complete acks d; the error is the source's (already logged).
func (r *stage) complete(d *transport.Delivery, msg *message.Message) error {
	ctx, cancel := r.callCtx()
	defer cancel()
	start := time.Now()
	err := r.guarded("ack", func() error { return r.src.Complete(ctx, d) })
	r.settled(transport.SettleAck, msg, 1, start, err)
	if err != nil {
		r.logError("ack failed; the message may be redelivered", err, watermill.LogFields{"id": d.ID})
	}
	return err
}

// nack retries d, or dead-letters it on its last attempt with why (the
// reason recorded with SetNackReason, or "") after the attempt count. With
// OrderedNackDeadLetter, a keyed message is dead-lettered on any attempt.
func (r *stage) nack(d *transport.Delivery, msg *message.Message, why string) transport.Outcome {
	if r.cfg.OrderedNack == OrderedNackDeadLetter && r.keyed(d, msg) {
		reason := fmt.Sprintf("nacked on attempt %d; ordered_nack=dead_letter skips a keyed message's retries so that its key moves on", d.Attempt)
		if why != "" {
			reason += ": " + why
		}
		r.deadLetter(d, msg, reason)
		return transport.OutcomeDeadLettered
	}
	if r.cfg.MaxAttempts > 0 && d.Attempt >= r.cfg.MaxAttempts {
		reason := fmt.Sprintf("nacked on attempt %d of %d (MaxAttempts)", d.Attempt, r.cfg.MaxAttempts)
		if why != "" {
			reason += ": " + why
		}
		r.deadLetter(d, msg, reason)
		return transport.OutcomeDeadLettered
	}
	delay := r.cfg.RetryDelayFor(d.Attempt)
	r.retry(d, msg, delay, why)
	if r.onRetry != nil {
		// The loop looks for the message when it falls due, not at its
		// next poll (an idle loop waits its whole empty delay).
		r.onRetry(r.cfg.Clock.Now().Add(delay))
	}
	return transport.OutcomeNacked
}

func (r *stage) retry(d *transport.Delivery, msg *message.Message, delay time.Duration, why string) {
	ctx, cancel := r.callCtx()
	defer cancel()
	start := time.Now()
	err := r.guarded("nack", func() error { return r.src.Retry(ctx, d, delay, why) })
	r.settled(transport.SettleNack, msg, 1, start, err)
	if err != nil {
		r.logError("nack failed; the message returns after its lease expires", err, watermill.LogFields{"id": d.ID})
	}
}

func (r *stage) deadLetter(d *transport.Delivery, msg *message.Message, reason string) {
	ctx, cancel := r.callCtx()
	defer cancel()
	start := time.Now()
	err := r.guarded("dead-letter", func() error { return r.src.DeadLetter(ctx, d, msg, reason) })
	r.settled(transport.SettleDeadLetter, msg, 1, start, err)
	if err != nil {
		r.logError("dead-letter failed; the message returns after its lease expires", err,
			watermill.LogFields{"id": d.ID, "reason": reason})
		return
	}
	r.observe(func(o transport.Observer) { o.DeadLettered(r.name, msg, reason) })
}
