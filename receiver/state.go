package receiver

import (
	"time"

	"github.com/berth-go/berth/transport"
)

// Status returns the listener's status.
func (l *Listener) Status() transport.Status { return l.State().Status }

// HasFaulted reports whether the current stage or the receive loop has
// faulted and not yet been rebuilt.
func (l *Listener) HasFaulted() bool { return l.currentFault() != nil }

// currentFault returns the fault of the receive loop or of the current
// stage, or nil.
func (l *Listener) currentFault() *transport.Fault {
	if f := l.loopFault.Load(); f != nil {
		return f
	}
	if r := l.current(); r != nil {
		return r.Fault()
	}
	return nil
}

// State returns a snapshot of the listener.
func (l *Listener) State() transport.ListenerState {
	l.mu.Lock()
	r := l.recv
	s := transport.ListenerState{
		Name:        l.cfg.Name,
		Destination: l.cfg.Destination,
		Latched:     l.latched,
		LastError:   l.lastErr,
		StartedAt:   l.startedAt,
	}
	paused := l.paused
	lastFault := l.lastFault
	l.mu.Unlock()
	if r != nil {
		s.Buffered, s.InFlight = r.Counts()
	}
	s.BatchPending = l.pending.Load()
	s.QueueCount = s.Buffered + s.InFlight + l.batchPending()
	s.Rebuilds = l.rebuilds.Load()
	s.Wave = int(l.waveSize.Load())
	s.ConsecutiveFailures = int(l.failures.Load())
	s.QueueMissing = l.queueGone.Load()
	if ns := l.lastReceive.Load(); ns != 0 {
		s.LastReceive = time.Unix(0, ns)
	}
	last := l.lastContactNS()
	if last != 0 {
		s.LastContact = time.Unix(0, last)
	}
	s.ContactFailing = l.contactFailing(last, time.Now())
	s.Loop = transport.LoopState(l.loopState.Load())
	f := l.loopFault.Load()
	if f == nil && r != nil {
		f = r.Fault()
	}
	if f == nil {
		f = lastFault
	} else {
		s.Faulted = true
	}
	if f != nil {
		s.Fault = f.Error()
		s.FaultAt = f.At
	}
	select {
	case <-l.closed:
		s.Status = transport.StatusStopped
		s.Loop = transport.LoopStopped
		return s
	default:
	}
	switch {
	case !l.started.Load():
		s.Status = transport.StatusStopped
	case s.Faulted:
		s.Status = transport.StatusFaulted
		s.Loop = transport.LoopFaulted
	case paused:
		s.Status = transport.StatusPaused
	case s.Latched:
		s.Status = transport.StatusTooBusy
	default:
		s.Status = transport.StatusAccepting
	}
	return s
}
