package receiver

import (
	"errors"
	"time"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// StallChecks is how many consecutive watchdog ticks a stage may hold
// buffered deliveries with free permits without dispatching any before the
// watchdog declares it stalled (faulted) and rebuilds it: a stage that
// accepts deliveries but no longer hands them on is a zombie.
const StallChecks = 8

// watchdog applies back-pressure promptly, detects stalls once per
// CheckInterval, and rebuilds a faulted stage half a check interval after
// it sees the fault, whatever the listener's status; a paused listener
// stays paused. Its waits run on the configured clock.
func (l *Listener) watchdog() {
	defer l.goroutines.Done()
	tick := l.pcfg.Clock.After(l.pcfg.CheckInterval)
	var rebuild <-chan time.Time // armed when a fault is first seen
	var stall stallDetector
	for {
		select {
		case <-tick:
			tick = l.pcfg.Clock.After(l.pcfg.CheckInterval)
			l.checkStall(&stall)
		case <-l.checkKick:
		case <-rebuild:
			rebuild = nil
			l.rebuildFaulted()
			continue
		case <-l.stopCh:
			return
		}
		l.check()
		if rebuild == nil && l.HasFaulted() {
			// Rebuild half a check interval after the fault is seen: soon,
			// yet long enough for health to report it, and never in a spin.
			rebuild = l.pcfg.Clock.After(l.pcfg.CheckInterval / 2)
		}
	}
}

type stallDetector struct {
	recv       pipe
	dispatched int64
	ticks      int
}

// checkStall records a stall fault when the stage has had buffered
// deliveries and free permits for StallChecks ticks without dispatching.
func (l *Listener) checkStall(s *stallDetector) {
	r := l.current()
	if r == nil || r.Fault() != nil {
		s.ticks = 0
		return
	}
	d := r.Dispatched()
	stuck := r.Buffered() > 0 && r.InFlight() < l.pcfg.Concurrency && d == s.dispatched && r == s.recv
	s.recv, s.dispatched = r, d
	if !stuck {
		s.ticks = 0
		return
	}
	s.ticks++
	if s.ticks >= StallChecks {
		s.ticks = 0
		l.recordLoopFault("dispatch", errors.New("stalled: buffered deliveries and free permits, nothing dispatched"))
	}
}

// rebuildFaulted replaces a faulted stage, whatever the listener's status;
// a paused listener stays paused.
func (l *Listener) rebuildFaulted() {
	defer func() {
		if p := recover(); p != nil {
			l.logError("watchdog rebuild panicked", guard.PanicError(p), nil)
		}
	}()
	if !l.HasFaulted() || l.stopping() {
		return
	}
	if err := l.replaceStage(true); err != nil && !errors.Is(err, transport.ErrClosed) {
		l.logError("rebuilding faulted receiver failed; will retry", err, nil)
	}
}
