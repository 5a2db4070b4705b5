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
//     within the last window and no trailing one is pending;
//   - any other insert leaves it out and joins the pending trailing
//     notification (opening one, due one window after the last
//     notification, when none is pending);
//   - a trailing notification is sent when it is due and every insert that
//     joined it has finished, on its own statement, so after those inserts
//     committed; it is not sent when none of them committed. Inserts that
//     arrive once it is due join the next one.
//
// So a steady flow costs one notification per window and the last message
// of a burst is announced at most one window (plus its insert) late.
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

type gateQueue struct {
	q    Queue
	last time.Time // when the last notification went out (or started to)
	open *trailing // the pending trailing notification that inserts join; nil when none
}

// trailing is one pending trailing notification.
type trailing struct {
	q        Queue
	timer    *time.Timer
	inflight int  // joined inserts still running
	owed     bool // a joined insert committed
	due      bool // its window has ended
	sent     bool
}

func newNotifyGate(window time.Duration, logger watermill.LoggerAdapter, send func(context.Context, Queue) error) *notifyGate {
	return &notifyGate{window: window, send: send, logger: logger, qs: map[string]*gateQueue{}}
}

// begin is called before an insert into q. It reports whether the insert
// carries its notification; otherwise t is the trailing notification it
// joined, to pass to end once the insert has finished.
func (g *notifyGate) begin(q Queue) (notify bool, t *trailing) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	gq := g.qs[q.Name]
	if gq == nil {
		if len(g.qs) >= maxCachedTopics {
			g.pruneLocked(now)
		}
		gq = &gateQueue{q: q}
		g.qs[q.Name] = gq
	}
	if g.closed || gq.open == nil && now.Sub(gq.last) >= g.window {
		gq.last = now
		return true, nil
	}
	if gq.open == nil {
		t := &trailing{q: q}
		gq.open = t
		t.timer = time.AfterFunc(gq.last.Add(g.window).Sub(now), func() { g.fire(gq, t) })
	}
	gq.open.inflight++
	return false, gq.open
}

// end records that an insert that joined t finished; committed: it
// inserted its rows.
func (g *notifyGate) end(t *trailing, committed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t.inflight--
	t.owed = t.owed || committed
	g.sendIfReadyLocked(t)
}

// fire is t's timer: its window has ended.
func (g *notifyGate) fire(gq *gateQueue, t *trailing) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.due {
		return // flushed by close
	}
	t.due = true
	if gq.open == t {
		gq.open = nil
		gq.last = time.Now()
	}
	g.sendIfReadyLocked(t)
}

func (g *notifyGate) sendIfReadyLocked(t *trailing) {
	if !t.due || t.inflight > 0 || !t.owed || t.sent || g.closed {
		return
	}
	t.sent = true
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
		if t.owed && !t.sent {
			t.sent = true
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
