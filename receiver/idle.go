package receiver

import (
	"sync"
	"time"

	"github.com/berth-go/berth/transport"
)

// workerLinger is how long, at least, a worker that found nothing to take
// waits for the next delivery before it exits (at most twice as long). It
// spans the gap between a buffer running dry and the next claim's rows (a
// few milliseconds on PostgreSQL), so that the workers of a busy stage are
// reused rather than started again; an idle stage keeps none for longer.
const workerLinger = 50 * time.Millisecond

// idleWorkers are a stage's lingering workers: each waits on a mailbox of
// its own for its next delivery, and the most recently idle is handed the
// next one. A select per linger on a hand-off channel that every lingering
// worker shared, with the stop channel and a timer of the worker's own,
// made each message in a drain lock two channels that hundreds of workers
// queued on and arm a timer. One timer (reap) ends the workers idle for
// longer than workerLinger, the least recently used first; close ends them
// all.
type idleWorkers struct {
	mu     sync.Mutex
	stack  []*mailbox // the most recently idle last
	reaper *time.Timer
	armed  bool // reaper is set to fire
	closed bool
}

// A mailbox is one lingering worker's: it receives the worker's next
// delivery, or nil when the worker is to exit.
type mailbox struct {
	ch    chan *transport.Delivery // cap 1
	since time.Time                // when the worker went idle
}

func newMailbox() *mailbox { return &mailbox{ch: make(chan *transport.Delivery, 1)} }

// hand gives d to the most recently idle worker, if one waits.
func (w *idleWorkers) hand(d *transport.Delivery) bool {
	w.mu.Lock()
	n := len(w.stack)
	if n == 0 {
		w.mu.Unlock()
		return false
	}
	m := w.stack[n-1]
	w.stack[n-1] = nil
	w.stack = w.stack[:n-1]
	w.mu.Unlock()
	m.ch <- d
	return true
}

// wait parks the calling worker with m until it is handed a delivery, or
// returns nil when the worker is to exit: it lingered long enough, or the
// stage stopped.
func (w *idleWorkers) wait(m *mailbox) *transport.Delivery {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	m.since = time.Now()
	w.stack = append(w.stack, m)
	if !w.armed {
		w.armed = true
		if w.reaper == nil {
			w.reaper = time.AfterFunc(workerLinger, w.reap)
		} else {
			w.reaper.Reset(workerLinger)
		}
	}
	w.mu.Unlock()
	return <-m.ch
}

// reap ends the workers idle for workerLinger or longer, and sets itself
// to run again while any worker is idle.
func (w *idleWorkers) reap() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	if w.closed {
		return
	}
	cutoff := time.Now().Add(-workerLinger)
	k := 0
	for k < len(w.stack) && !w.stack[k].since.After(cutoff) {
		w.stack[k].ch <- nil
		k++
	}
	n := copy(w.stack, w.stack[k:])
	clear(w.stack[n:])
	w.stack = w.stack[:n]
	if n > 0 {
		w.armed = true
		w.reaper.Reset(workerLinger)
	}
}

// close ends every idle worker, and those that go idle later at once.
func (w *idleWorkers) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, m := range w.stack {
		m.ch <- nil
	}
	w.stack = nil
	if w.reaper != nil {
		w.reaper.Stop()
	}
}
