package receiver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/internal/backoff"
	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/wave"
)

// wakeHoldoffBase is the first delay before answering a wake-up after one
// whose claim came back empty.
const wakeHoldoffBase = 5 * time.Millisecond

// retryDueSlack is how long after a retry's due time the loop claims, so
// that the row is due when the claim runs (a database rounds to the
// millisecond, and its clock ticks apart from this one). A retry whose due
// time is this much before a claim started is taken as found by it.
const retryDueSlack = 5 * time.Millisecond

// loop is the receive loop: it claims waves sized by the wave controller
// into the stage's free space, backs off after errors, and sleeps out empty
// delays (ending them early on a wake-up from the source).
func (l *Listener) loop() {
	defer l.goroutines.Done()
	defer func() {
		if p := recover(); p != nil {
			// The loop must not die silently: record the fault first (the
			// listener reports faulted and stops fetching until the watchdog
			// rebuilds), then restart the loop, then try to log.
			l.recordLoopFault("receive", fmt.Errorf("panic: %v", p))
			if !l.stopping() {
				l.goroutines.Add(1)
				go l.loop()
			}
			l.logError("receive loop panicked; restarted, waiting for the watchdog", fmt.Errorf("%v\n%s", p, debug.Stack()), nil)
		}
	}()
	ctrl, err := wave.New(l.pcfg.wave(), l.pcfg.Clock)
	if err != nil { // validated already
		panic(err)
	}
	ctx, cancel := l.stopContext()
	defer cancel()
	errBackoff := backoff.Policy{Base: l.pcfg.ErrorBackoff, Max: l.pcfg.MaxErrorDelay}
	var (
		errCeiling time.Duration // the last error delay, before jitter
		woken      bool          // this wave answers a wake-up
		holdoff    time.Duration // how long to sit on the next wake-up
	)
	for !l.stopping() {
		r, ok := l.evaluate()
		if !ok {
			if !l.wait(l.pcfg.CheckInterval) {
				return
			}
			continue
		}
		free := r.Free()
		if l.claimSize > 0 && free < l.claimSize && r.Buffered() >= l.claimSize {
			// A partial request would cost as much as a full one; the
			// buffer has work enough until a full request fits.
			free = 0
		}
		n := ctrl.Next(free)
		if n == 0 {
			if !l.wait(l.pcfg.CheckInterval) {
				return
			}
			continue
		}
		l.waveSize.Store(int64(n))
		var claimAt time.Time // read only while a retry is pending
		if l.retryDues.Len() > 0 {
			claimAt = l.pcfg.Clock.Now()
		}
		launched, found, claimed, err := l.claimWave(ctx, r, n, free)
		l.observe(func(o transport.Observer) { o.WaveDone(l.cfg.Name, launched, found, claimed, err) })
		if err != nil {
			if l.stopping() {
				return
			}
			l.failures.Add(1)
			l.queueGone.Store(errors.Is(err, transport.ErrQueueNotFound))
			l.mu.Lock()
			l.lastErr = err.Error()
			l.mu.Unlock()
			var delay time.Duration
			delay, errCeiling = errBackoff.Next(errCeiling)
			l.loopState.Store(int32(transport.LoopBackingOff))
			l.logError("receive failed; backing off", err, watermill.LogFields{"listener": l.cfg.Name, "delay": delay})
			ctrl.Reset()
			if !l.waitBackoff(ctx, delay) {
				return
			}
			continue
		}
		errCeiling = 0
		l.failures.Store(0)
		l.queueGone.Store(false)
		l.lastReceive.Store(time.Now().UnixNano())
		l.loopState.Store(int32(transport.LoopRunning))
		if woken {
			// Adapt to the wake-ups this loop loses: when many instances
			// hear the same wake-up, the ones whose claims keep coming back
			// empty answer later and later (up to the empty delay), so the
			// winners take the batch and the losers stop spending claims.
			if found == 0 {
				holdoff = min(max(2*holdoff, wakeHoldoffBase), max(l.pcfg.EmptyDelay, wakeHoldoffBase))
			} else if holdoff /= 2; holdoff < wakeHoldoffBase {
				// Winning a race shortens the holdoff gradually, so an
				// instance that wins now and then does not rejoin every race.
				holdoff = 0
			}
			woken = false
		}
		if delay := ctrl.Observe(launched, found); delay > 0 {
			ok, w := l.waitEmpty(delay, holdoff, claimAt)
			if !ok {
				return
			}
			woken = w
			if w && l.hinter != nil {
				ctrl.Hint(l.hinter.TakeWakeHint())
			}
		}
	}
}

// retryDue records the due time of a retry this listener's stage issued
// and, when it is the earliest, tells a loop in its empty wait.
func (l *Listener) retryDue(at time.Time) {
	if l.retryDues.Add(at) {
		select {
		case l.dueKick <- struct{}{}:
		default:
		}
	}
}

// backoffPing is how often a loop backing off after receive errors pings
// a transport.Pinger source.
const backoffPing = time.Second

// waitBackoff is wait for a receive error's backoff d. With a Pinger
// source and d longer than backoffPing, it pings the source every
// backoffPing and ends as soon as a ping succeeds after one failed: the
// broker was unreachable and answers again (transport.Pinger). A ping that
// never failed (the broker answers, but the claims fail) leaves the
// backoff as it is.
func (l *Listener) waitBackoff(ctx context.Context, d time.Duration) bool {
	if l.contact.pinger == nil || d <= backoffPing {
		return l.wait(d)
	}
	clock := l.pcfg.Clock
	end := clock.Now().Add(d)
	failed := false
	for {
		left := end.Sub(clock.Now())
		if left <= 0 {
			return true
		}
		if !l.wait(min(backoffPing, left)) {
			return false
		}
		switch err := l.ping(ctx, backoffPing); {
		case err != nil:
			failed = true
		case failed:
			l.logInfo("the broker answers again; receiving before the backoff ends", watermill.LogFields{"listener": l.cfg.Name})
			return true
		}
	}
}

// wait blocks until d passes, a kick (a count or state change), or stop.
// It reports false on stop.
func (l *Listener) wait(d time.Duration) bool {
	select {
	case <-l.pcfg.Clock.After(d):
	case <-l.loopKick:
	case <-l.stopCh:
		return false
	}
	return true
}

// waitEmpty waits out the empty delay after an empty wave. It returns early
// on a wake-up from the source (after holdoff, jittered) and reports whether
// it was woken, and at once, not woken, on a kick (transport.Kicker);
// counting changes (acks) do not end it. It also returns,
// not woken, when a retry this listener issued falls due (retryDues, plus
// retryDueSlack), so that a retry shorter than the empty delay is not
// handled a whole empty delay late; the retries due before the empty wave's
// claim started (claimAt; zero when none was pending) are forgotten, that
// claim looked for them. Other instances' retries are found by polling. It
// reports false on stop.
func (l *Listener) waitEmpty(d, holdoff time.Duration, claimAt time.Time) (ok, woken bool) {
	clock := l.pcfg.Clock
	if !claimAt.IsZero() {
		l.retryDues.DropUntil(claimAt.Add(-retryDueSlack))
	}
	end, wait := time.Time{}, d
	for {
		if at, ok := l.retryDues.Next(); ok || !end.IsZero() {
			now := clock.Now()
			if end.IsZero() {
				end = now.Add(d)
			}
			wait = max(end.Sub(now), 0)
			if due := at.Add(retryDueSlack); ok && due.Before(end) {
				wait = max(due.Sub(now), 0)
			}
		}
		select {
		case <-clock.After(wait):
			return true, false
		case <-l.dueKick:
			// An earlier retry due time was recorded. (With none pending
			// before, the empty delay counts from here: at most a wave's
			// time too long.)
			continue
		case <-l.wakeCh:
		case <-l.kickCh:
			// Rows only this source can take (transport.Kicker): no herd
			// to hold off, and no wake-up whose losses to count.
			return true, false
		case <-l.stopCh:
			return false, false
		}
		break
	}
	// Answer after a jittered delay: instances that all heard the same
	// wake-up then claim one after another instead of splitting the rows
	// between simultaneous claims, so the first takes the batch and the
	// others learn to hold off.
	d = rand.N(wakeHoldoffBase)
	if holdoff > 0 {
		d = holdoff/2 + rand.N(holdoff/2+1)
	}
	select {
	case <-l.pcfg.Clock.After(d):
	case <-l.stopCh:
		return false, false
	}
	return true, true
}

// claimWave launches one wave of n probes and pushes what they claim.
func (l *Listener) claimWave(ctx context.Context, r pipe, n, free int) (launched, found, claimed int, err error) {
	if l.claimSize == 0 {
		// Rows claimed for permits free now go to user code at once,
		// claimed straight into processing; the rest are buffered.
		reserved := 0
		if l.direct != nil {
			reserved = r.Reserve(n)
			if reserved == n && n >= l.pcfg.WaveCap {
				// A wave at its cap whose every row has a free permit
				// grows by the permits still free, up to twice the cap:
				// those rows go straight to user code, wait in no buffer
				// and need no lease gate, so one statement claims more of
				// what the workers can take now (docs/benchmarks.md:
				// "Direct claims beyond the wave cap").
				extra := r.Reserve(l.pcfg.WaveCap)
				reserved += extra
				n += extra
			}
		}
		ds, err := l.claim(ctx, n, reserved)
		if err != nil {
			ds = nil
		}
		pushed := l.handOver(ds, func(ds []*transport.Delivery) {
			if reserved > 0 {
				r.PushReserved(ds, reserved) // frees the permits left over
			} else {
				r.Push(ds)
			}
		})
		if err != nil {
			return n, 0, 0, err
		}
		return n, pushed, pushed, nil
	}
	// One Claim per probe, run concurrently, each pushed as it returns. Ask
	// in full-size requests only: no more probes than full requests fit in
	// the free space (one smaller request when not even one fits).
	n = min(n, max(1, free/l.claimSize))
	per := min(l.claimSize, free)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
		hits   int
		budget = free
	)
	for i := 0; i < n && budget > 0; i++ {
		m := min(per, budget)
		budget -= m
		launched++
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds, err := l.claim(ctx, m, 0)
			pushed := l.handOver(ds, func(ds []*transport.Delivery) {
				if len(ds) > 0 {
					l.current().Push(ds) // the stage installed now releases them if it stopped
				}
			})
			mu.Lock()
			defer mu.Unlock()
			claimed += pushed
			if err != nil {
				errs = append(errs, err)
			} else if pushed >= m {
				hits++ // a probe finds its message when the call comes back full
			}
		}()
	}
	wg.Wait()
	if claimed == 0 && len(errs) > 0 {
		return launched, 0, claimed, errors.Join(errs...)
	}
	return launched, hits, claimed, nil
}

// claim makes one Claim call on the source (ClaimDirect when direct > 0)
// and reports it to the observer, unless the listener's own stop cut it
// short. A Claim that panics records a receive fault (the watchdog
// rebuilds) and counts as a failed call.
func (l *Listener) claim(ctx context.Context, max, direct int) ([]*transport.Delivery, error) {
	start := time.Now()
	var (
		ds  []*transport.Delivery
		err error
	)
	call := func() { ds, err = l.cfg.Source.Claim(ctx, max) }
	if direct > 0 {
		call = func() { ds, err = l.direct.ClaimDirect(ctx, max, direct) }
	}
	l.noteClaimStart(start)
	if p := guard.Call(call); p != nil {
		l.noteClaimEnd(p)
		l.recordLoopFault("receive", p)
		return nil, p
	}
	l.noteClaimEnd(err)
	if err == nil || !l.stopping() {
		l.observe(func(o transport.Observer) { o.Received(l.cfg.Name, start, len(ds), err) })
	}
	return ds, err
}

// handOver gives ds, rows a claim returned, to the stage with push
// (which it calls, with nil when they go back, so that reserved permits
// are freed) and returns how many it gave. When the listener was paused
// while the claim was in flight, the rows go back to the source at once,
// with no attempt counted (started ones included: the source undoes
// theirs): Pause released what was buffered when it was called, and these
// would otherwise reach user code after the listener reported paused with
// nothing buffered (under load a claim can wait seconds for a connection
// before it runs). The check and the push hold pauseMu against Pause.
func (l *Listener) handOver(ds []*transport.Delivery, push func([]*transport.Delivery)) int {
	l.pauseMu.RLock()
	l.mu.Lock()
	paused := l.paused
	l.mu.Unlock()
	if !paused || len(ds) == 0 {
		push(ds)
		l.pauseMu.RUnlock()
		return len(ds)
	}
	push(nil)
	l.pauseMu.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := guard.Run(func() error { return l.cfg.Source.Release(ctx, ds) }); err != nil {
		l.logError("release of rows claimed while the listener paused failed; the broker's lease expiry will return them", err,
			watermill.LogFields{"count": len(ds)})
	}
	return 0
}

// recordLoopFault records a fault of the receive loop (the first one wins
// until the watchdog rebuilds) and tells the observer.
func (l *Listener) recordLoopFault(stage string, cause error) {
	f := &transport.Fault{Stage: stage, Cause: cause, At: time.Now()}
	if l.loopFault.CompareAndSwap(nil, f) {
		l.observe(func(o transport.Observer) { o.Faulted(l.cfg.Name, f) })
	}
	l.kick()
}
