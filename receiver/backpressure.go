package receiver

import "github.com/berth-go/berth/internal/guard"

// QueueCount is the number of messages the listener holds: buffered, in
// flight, and pending in batching stages.
//
// The stage's counts are read before the pending count: a member entering
// a batch is counted pending before its permit is freed, so read in this
// order it may be counted twice but is never missed, and back-pressure
// errs on the side of fetching less.
func (l *Listener) QueueCount() int {
	n := 0
	if r := l.current(); r != nil {
		b, f := r.Counts()
		n = b + f
	}
	return n + l.batchPending()
}

// batchPending is the pending count as QueueCount sees it.
func (l *Listener) batchPending() int {
	if l.ignorePending {
		return 0
	}
	return l.pending.Load()
}

// evaluate applies back-pressure and reports whether the loop may fetch:
// above MaxQueue the listener latches (too busy) until QueueCount falls to
// RestartQueue; a faulted or paused listener does not fetch either.
func (l *Listener) evaluate() (pipe, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.recv
	if r == nil || r.Fault() != nil || l.loopFault.Load() != nil {
		return r, false
	}
	b, f := r.Counts()
	n := b + f + l.batchPending() // in QueueCount's order
	if !l.latched && n > l.pcfg.MaxQueue {
		l.latched = true
	} else if l.latched && n <= l.pcfg.RestartQueue {
		l.latched = false
	}
	return r, !l.paused && !l.latched
}

// check applies back-pressure at once (the watchdog calls it on every count
// change) and wakes the loop when the latch moved.
func (l *Listener) check() {
	defer func() {
		if p := recover(); p != nil {
			l.logError("watchdog check panicked", guard.PanicError(p), nil)
		}
	}()
	wasLatched := l.isLatched()
	l.evaluate()
	if l.isLatched() != wasLatched {
		select {
		case l.loopKick <- struct{}{}:
		default:
		}
	}
}

func (l *Listener) isLatched() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.latched
}
