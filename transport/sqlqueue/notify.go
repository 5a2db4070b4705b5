package sqlqueue

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/internal/guard"
)

// A NotifyCoalescer is a Notifier dialect whose inserts can leave their
// notification out, so that a publisher sends at most one notification per
// queue per window (PublisherConfig.NotifyWindow) instead of one per
// insert: each notification costs every listening backend a transaction.
type NotifyCoalescer interface {
	Notifier
	// InsertNotify is Insert with the notification sent (notify true) or
	// left out. The statement text must not depend on notify (an argument
	// decides), so that one prepared statement serves both.
	InsertNotify(q Queue, rows []InsertRow, notify bool) []Stmt
	// Notify returns a statement, run on its own, that sends q's wake-up
	// notification: the trailing notification of a window whose inserts
	// left theirs out.
	Notify(q Queue) Stmt
}

// notifyGate decides, per queue, which of a publisher's inserts carry the
// wake-up notification, and sends the trailing ones. The rules:
//
//   - an insert carries its notification when none went out for its queue
//     within the last window;
//   - any other insert leaves it out and joins the queue's pending trailing
//     notification (opening one when none is pending);
//   - an insert that carries its notification covers those inserts of the
//     pending trailing notification that have finished when it begins (its
//     NOTIFY is delivered at its commit, after theirs): when all have, the
//     trailing notification is dropped (or sent at once if that insert
//     fails); otherwise it waits for the rest, due a window and a grace
//     after this one;
//   - otherwise the trailing notification goes out on its own statement,
//     notifyGrace after the window, once every insert that joined it has
//     finished (so after those committed); not at all when none of them
//     committed.
//
// So a steady flow costs one notification per window, carried by an
// insert (no transaction of its own), and the last message of a burst is
// announced at most window + notifyGrace (plus its insert) late.
// Subscribers sharing the publisher's pool are woken at once in-process
// (localWake) whatever the gate decides.
type notifyGate struct {
	window time.Duration
	send   func(ctx context.Context, q Queue) error
	logger watermill.LoggerAdapter

	mu     sync.Mutex
	qs     map[string]*gateQueue // by queue table name
	closed bool
	sends  sync.WaitGroup // trailing notifications being sent
}

// notifyGrace is how long after its window a trailing notification waits
// for an insert that carries one to cover it, as a fraction of the window:
// a whole window. Then a steady flow of one insert per half a window to a
// window (40 to 80 a second per queue at 25 ms) has every other insert
// carry the notification, covering the trailing one; with half a window,
// the trailing one went out on its own just before that insert, a
// transaction each (the measurements: docs/transports/postgres.md, "One
// NOTIFY per window"). The cost: a burst's last message is announced up
// to two windows late.
const notifyGrace = 1 // window / notifyGrace

type gateQueue struct {
	last time.Time // when the last notification went out (or started to)
	open *trailing // the pending trailing notification that inserts join; nil when none
}

// trailing is one pending trailing notification.
type trailing struct {
	q        Queue
	timer    *time.Timer
	inflight int  // joined inserts still running
	owed     bool // a joined insert committed
	due      bool // to be sent once no joined insert runs
	done     bool // sent, or covered by an insert that committed
}

// ticket is what an insert passes from begin to end.
type ticket struct {
	joined  *trailing // the trailing notification this insert joined
	covered *trailing // the trailing notification this insert's NOTIFY covers
	// partial: the trailing notification whose finished inserts this
	// insert's NOTIFY covers (owed: it was owed before), while others run.
	partial *trailing
	owed    bool
}

func newNotifyGate(window time.Duration, logger watermill.LoggerAdapter, send func(context.Context, Queue) error) *notifyGate {
	return &notifyGate{window: window, send: send, logger: logger, qs: map[string]*gateQueue{}}
}

// begin is called before an insert into q. It reports whether the insert
// carries its notification, and the ticket to pass to end once the insert
// has finished.
func (g *notifyGate) begin(q Queue) (notify bool, tk ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	gq := g.qs[q.Name]
	if gq == nil {
		if len(g.qs) >= maxCachedTopics {
			g.pruneLocked(now)
		}
		gq = &gateQueue{}
		g.qs[q.Name] = gq
	}
	if g.closed {
		return true, tk
	}
	if now.Sub(gq.last) >= g.window {
		gq.last = now
		if t := gq.open; t != nil {
			if t.inflight == 0 {
				gq.open = nil
				t.timer.Stop()
				tk.covered = t
			} else {
				// Those of its inserts that have finished are covered;
				// the others wait for the next notification.
				tk.partial, tk.owed = t, t.owed
				t.owed = false
				t.timer.Reset(g.window + g.window/notifyGrace)
			}
		}
		return true, tk
	}
	if gq.open == nil {
		t := &trailing{q: q}
		gq.open = t
		t.timer = time.AfterFunc(gq.last.Add(g.window+g.window/notifyGrace).Sub(now), func() { g.fire(gq, t) })
	}
	gq.open.inflight++
	return false, ticket{joined: gq.open}
}

// end records that an insert finished; committed: it inserted its rows.
func (g *notifyGate) end(tk ticket, committed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t := tk.joined; t != nil {
		t.inflight--
		t.owed = t.owed || committed
		g.sendIfReadyLocked(t)
	}
	if t := tk.covered; t != nil {
		if committed {
			t.done = true
		} else {
			t.due = true
			g.sendIfReadyLocked(t)
		}
	}
	if t := tk.partial; t != nil && !committed {
		t.owed = t.owed || tk.owed
		g.sendIfReadyLocked(t)
	}
}

// fire is t's timer: its window and grace have ended.
func (g *notifyGate) fire(gq *gateQueue, t *trailing) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.due || t.done {
		return // covered, or flushed by close
	}
	t.due = true
	if gq.open == t {
		gq.open = nil
		gq.last = time.Now()
	}
	g.sendIfReadyLocked(t)
}

func (g *notifyGate) sendIfReadyLocked(t *trailing) {
	if !t.due || t.inflight > 0 || !t.owed || t.done || g.closed {
		return
	}
	t.done = true
	g.sends.Add(1)
	go func() {
		defer g.sends.Done()
		g.notify(t.q)
	}()
}

// notify sends q's trailing notification; a failure is logged (the
// subscribers' poll finds the rows).
func (g *notifyGate) notify(q Queue) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultStatementTimeout)
	defer cancel()
	if err := g.send(ctx, q); err != nil {
		guard.Do(func() {
			g.logger.Error("could not send the trailing wake-up notification; subscribers in other processes find the rows by their poll", err,
				watermill.LogFields{"queue": q.Name})
		})
	}
}

// pruneLocked forgets queues with nothing pending whose window has ended.
func (g *notifyGate) pruneLocked(now time.Time) {
	for name, gq := range g.qs {
		if gq.open == nil && now.Sub(gq.last) >= g.window {
			delete(g.qs, name)
		}
	}
}

// close sends every pending trailing notification owed now, waits for
// those being sent, and makes every later insert carry its own. Call it
// once no insert is running.
func (g *notifyGate) close() {
	g.mu.Lock()
	var owed []Queue
	for _, gq := range g.qs {
		t := gq.open
		if t == nil {
			continue
		}
		gq.open = nil
		t.timer.Stop()
		t.due = true
		if t.owed && !t.done {
			t.done = true
			owed = append(owed, t.q)
		}
	}
	// A trailing notification that was due but waited for its inserts
	// was sent by the last of them to end (no insert is running now).
	g.closed = true
	g.mu.Unlock()
	for _, q := range owed {
		g.notify(q)
	}
	g.sends.Wait()
}
