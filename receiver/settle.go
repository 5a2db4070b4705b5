package receiver

import (
	"context"
	"fmt"
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

// callCtx returns the context of one call to the source.
func (r *stage) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.settleCtx, callTimeout)
}

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
	r.retry(d, msg, r.cfg.RetryDelayFor(d.Attempt))
	return transport.OutcomeNacked
}

func (r *stage) retry(d *transport.Delivery, msg *message.Message, delay time.Duration) {
	ctx, cancel := r.callCtx()
	defer cancel()
	start := time.Now()
	err := r.guarded("nack", func() error { return r.src.Retry(ctx, d, delay) })
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
