package receiver

import (
	"context"
	"time"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// Contact: what the listener knows of whether its broker answers, for
// health (ListenerState.LastContact and ContactFailing). Successful Claims
// count as contact unless the source is a transport.ContactReporter (an
// idle SQL queue claims without a round trip), whose own record is used
// instead. The contact goroutine pings a transport.Pinger source when the
// listener has not heard from the broker for Config.ContactInterval, so a
// blackholed or frozen broker shows within seconds even when nothing is
// claimed.

// claimLate is how long past its long-poll wait a Claim (or a ping) may
// run before it counts as unanswered.
const claimLate = time.Second

// contactState is what the listener learns of its source's contact at
// construction; the record itself (contactAt, contactFail, pingFail,
// claimSince, pingSince) is in Unix nanoseconds, 0 meaning never or none.
type contactState struct {
	reporter transport.ContactReporter // nil: successful Claims are contact
	pinger   transport.Pinger          // nil: no pings
	wait     time.Duration             // a Claim's long-poll wait (LongPoller)
}

// noteClaimStart records that a Claim call began.
func (l *Listener) noteClaimStart(at time.Time) { l.claimSince.Store(at.UnixNano()) }

// noteClaimEnd records a Claim's outcome: a success is contact (unless the
// source reports its own), an error a failed call (unless the listener's
// own stop cut it short).
func (l *Listener) noteClaimEnd(err error) {
	l.claimSince.Store(0)
	now := time.Now().UnixNano()
	switch {
	case err != nil && !l.stopping():
		l.contactFail.Store(now)
	case err == nil && l.contact.reporter == nil:
		l.contactAt.Store(now)
	}
}

// lastContactNS is when the broker last answered, in Unix nanoseconds (0:
// never).
func (l *Listener) lastContactNS() int64 {
	ns := l.contactAt.Load()
	if r := l.contact.reporter; r != nil {
		var t time.Time
		guard.Do(func() { t = r.LastContact() })
		if !t.IsZero() {
			ns = max(ns, t.UnixNano())
		}
	}
	return ns
}

// contactFailing reports whether a call made after last (lastContactNS)
// failed, or a Claim has been outstanding past its wait and claimLate, or
// a ping past claimLate.
func (l *Listener) contactFailing(last int64, now time.Time) bool {
	if l.contactFail.Load() > last {
		return true
	}
	if c := l.claimSince.Load(); c != 0 && now.Sub(time.Unix(0, c)) > l.contact.wait+claimLate {
		return true
	}
	if p := l.pingSince.Load(); p != 0 && now.Sub(time.Unix(0, p)) > claimLate {
		return true
	}
	return false
}

// ping pings the source, bounded by d, and records the outcome. A source
// that is not a Pinger returns nil.
func (l *Listener) ping(ctx context.Context, d time.Duration) error {
	p := l.contact.pinger
	if p == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var err error
	// An outage: a ping failed since the broker's last answer (a Claim
	// failing while pings succeed is the broker refusing claims, not
	// being away).
	outage := l.pingFail.Load() > l.lastContactNS()
	l.pingSince.CompareAndSwap(0, time.Now().UnixNano())
	if pv := guard.Call(func() { err = p.Ping(pctx) }); pv != nil {
		err = guard.PanicError(pv)
	}
	l.pingSince.Store(0)
	if l.stopping() {
		return err
	}
	if err != nil {
		now := time.Now().UnixNano()
		l.contactFail.Store(now)
		l.pingFail.Store(now)
		return err
	}
	l.contactAt.Store(time.Now().UnixNano())
	if outage {
		// The broker answers again after failing: the receive failures
		// were the outage's, and health stops counting them
		// (receive_failing) now rather than after the next Claim, which
		// may be a long poll answering only at the end of its wait. A
		// broker that answers pings but fails claims (a permission) never
		// gets here: its pings never failed.
		l.failures.Store(0)
	}
	return nil
}

// contactLoop pings a Pinger source whenever the listener has not heard
// from the broker for ContactInterval and no Claim is still within its
// wait, and every tick while a call failed since the broker's last
// answer, while the listener is fetching (not paused). It checks once a
// second at most, on the configured clock.
func (l *Listener) contactLoop() {
	defer l.goroutines.Done()
	defer func() {
		if p := recover(); p != nil {
			l.logError("contact check panicked; pings stopped until the listener restarts", guard.PanicError(p), nil)
		}
	}()
	ctx, cancel := l.stopContext()
	defer cancel()
	every := l.pcfg.ContactInterval
	tick := min(every/2, time.Second)
	for {
		select {
		case <-l.pcfg.Clock.After(tick):
		case <-l.stopCh:
			return
		}
		now := time.Now()
		last := l.lastContactNS()
		// While calls fail, ping every tick: the heal is seen within a
		// second whatever the loop is doing (a Claim retrying inside the
		// client, a long poll), and costs a ping a second only during an
		// outage.
		failing := l.contactFail.Load() > last
		if !failing && last != 0 && now.Sub(time.Unix(0, last)) < every {
			continue
		}
		if c := l.claimSince.Load(); c != 0 && now.Sub(time.Unix(0, c)) < l.contact.wait+claimLate && !failing {
			// A long poll or a claim under way will tell; unless a call
			// failed since the last answer: then the broker may be back
			// while the poll is still held somewhere, and only a ping
			// tells at once.
			continue
		}
		l.mu.Lock()
		paused := l.paused
		l.mu.Unlock()
		if paused {
			continue
		}
		_ = l.ping(ctx, every)
	}
}
