package sqlqueue

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	ibackoff "github.com/berth-go/berth/internal/backoff"
	"github.com/berth-go/berth/internal/guard"
)

// localWake is the process-wide wake-up hub. Sources register under (pool,
// unquoted queue table); publishers in this process (dialects without a
// Notifier) and each pool's LISTEN connection (dialects with one) notify
// it.
//
// Waking every idle source on every notification makes a herd: all of them
// claim, one finds the rows, the others' claims come back empty. The hub
// instead debounces and elects:
//
//   - a notification of a key that had no wake-up within its debounce
//     window (the smallest SubscriberConfig.WakeDebounce of the key's
//     sources) wakes at once; the notifications that follow within the
//     window coalesce into one wake-up, at its end. A publisher's
//     coalesced NOTIFYs come at most one per NotifyWindow (25ms, the
//     default debounce), so a steady flow's each wake at once;
//   - that wake-up goes to one source only, the next idle one in
//     round-robin order (idle: its last claim came back empty, so its loop
//     is waiting for a wake-up or its empty delay). A source that is
//     claiming already needs no wake-up;
//   - when no source is idle (all are claiming or busy), every source gets
//     a pending wake-up, so a claim that raced with the insert is followed
//     by one more. Claim drops a pending wake-up at its start: whatever was
//     notified before a claim is covered by it.
//
// That elects one source per pool. Across pools (other processes), a
// dialect whose Notifier delivers every notification to every LISTEN
// connection would still wake one source in each of them, and all but one
// of their claims would come back empty. So each pool's LISTEN connection
// also takes part in an election per queue (WakeSession): the leader
// answers the queue's notifications, followers ignore them and find rows
// by their poll (the wave controller's empty delay) until they lead.
var localWake = &hub{qs: map[wakeKey]*wakeQueue{}, sessions: map[*sql.DB]*WakeSession{}}

// wakeKey identifies a queue as seen through one pool.
type wakeKey struct {
	db    *sql.DB
	table string
}

type hub struct {
	mu       sync.Mutex
	qs       map[wakeKey]*wakeQueue
	sessions map[*sql.DB]*WakeSession // each pool's current LISTEN session
}

// waiter is one source's registration.
type waiter struct {
	ch       chan struct{} // capacity 1: at most one pending wake-up
	idle     atomic.Bool   // the last claim came back empty
	debounce time.Duration // ≤ 0: none
	hint     atomic.Int64  // notifications announced to this source, not yet taken
	claimed  atomic.Int64  // when its last claim started (UnixNano)
	// woke: a wake-up was sent since the last claim started. The receive
	// loop reads ch itself (to end its empty delay), so the claim that
	// follows cannot tell from ch that it answers a wake-up.
	woke atomic.Bool
	// parked is the source's parked flag (nil: the source never parks).
	parked *atomic.Bool
}

func (w *waiter) send() {
	w.woke.Store(true)
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

type wakeQueue struct {
	ws      []*waiter
	next    int         // round-robin start
	timer   *time.Timer // the pending debounced wake-up; nil when none
	pending int         // notifications since the last wake-up fired
	// lastFire is when the last wake-up fired: the debounce window runs
	// from it.
	lastFire time.Time
	// follower: another pool leads this queue's wake-ups; notifications
	// from the LISTEN connection are ignored.
	follower bool
	// fired: when a wake-up was first sent that no claim has followed yet
	// (zero: none). A leader whose sources stop claiming (paused, too busy,
	// buffer full) gives the leadership up.
	fired time.Time
}

func (h *hub) add(k wakeKey, w *waiter) (remove func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.qs[k]
	if q == nil {
		q = &wakeQueue{}
		h.qs[k] = q
	}
	q.ws = append(q.ws, w)
	h.kickLocked(k.db) // a new queue to lead, or a leader that can claim again
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		defer h.kickLocked(k.db)
		for i, x := range q.ws {
			if x == w {
				q.ws = append(q.ws[:i], q.ws[i+1:]...)
				break
			}
		}
		if len(q.ws) == 0 {
			if q.timer != nil {
				q.timer.Stop()
				q.timer = nil
			}
			if h.qs[k] == q {
				delete(h.qs, k)
			}
		}
	}
}

// notify records that rows may have arrived in k's table.
func (h *hub) notify(k wakeKey) { h.notifyFrom(k, false) }

// notifyFrom is notify; listened: the notification came from the LISTEN
// connection, which a follower ignores.
func (h *hub) notifyFrom(k wakeKey, listened bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.qs[k]
	if q == nil || len(q.ws) == 0 || listened && q.follower {
		return // nobody listens, or another pool answers
	}
	q.pending++
	if q.timer != nil {
		return // coalesced into the pending wake-up
	}
	d := q.ws[0].debounce
	for _, w := range q.ws[1:] {
		d = min(d, w.debounce)
	}
	// Leading edge: a notification when none fired within the window
	// wakes at once; the ones after it wait for the window's end.
	wait := time.Until(q.lastFire.Add(d))
	if d <= 0 || wait <= 0 {
		q.fire()
		return
	}
	q.timer = time.AfterFunc(wait, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		q.timer = nil
		q.fire()
	})
}

// notifyListened records a notification received by db's LISTEN
// connection: ignored where another pool leads the queue.
func (h *hub) notifyListened(db *sql.DB, table string) { h.notifyFrom(wakeKey{db, table}, true) }

// leadable returns db's queue tables with a source.
func (h *hub) leadable(db *sql.DB) map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]bool{}
	for k, q := range h.qs {
		if k.db == db && len(q.ws) > 0 {
			out[k.table] = true
		}
	}
	return out
}

// unanswered reports for how long a wake-up of (db, table) has gone
// without a claim by any of the pool's sources (zero: none pending).
func (h *hub) unanswered(db *sql.DB, table string, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.qs[wakeKey{db, table}]
	if q == nil || q.fired.IsZero() {
		return 0
	}
	if q.claimedSince(q.fired) {
		q.fired = time.Time{}
		return 0
	}
	return now.Sub(q.fired)
}

// claimedSince reports whether a source of q started a claim at or after t.
func (q *wakeQueue) claimedSince(t time.Time) bool {
	for _, w := range q.ws {
		if w.claimed.Load() >= t.UnixNano() {
			return true
		}
	}
	return false
}

// setFollower marks whether another pool leads (db, table).
func (h *hub) setFollower(db *sql.DB, table string, follower bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.qs[wakeKey{db, table}]; q != nil {
		q.follower = follower
	}
}

// resetFollowers forgets db's election results (its session ended: with no
// LISTEN connection there is nothing to ignore, and the next session
// elects again).
func (h *hub) resetFollowers(db *sql.DB) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, q := range h.qs {
		if k.db == db {
			q.follower = false
		}
	}
}

// kickLocked asks db's LISTEN session, if any, to run its election now.
// Called with h.mu held.
func (h *hub) kickLocked(db *sql.DB) {
	if s := h.sessions[db]; s != nil {
		s.kick()
	}
}

// fire wakes the next idle source, or every source when none is idle.
// Called with the hub locked.
func (q *wakeQueue) fire() {
	announced := int64(q.pending)
	q.pending = 0
	q.lastFire = time.Now()
	if q.fired.IsZero() || q.claimedSince(q.fired) {
		q.fired = time.Now()
	}
	n := len(q.ws)
	for i := range n {
		j := (q.next + i) % n
		if q.ws[j].idle.Load() {
			q.next = (j + 1) % n
			q.ws[j].hint.Add(announced)
			q.ws[j].send()
			return
		}
	}
	for _, w := range q.ws {
		w.hint.Add(announced)
		w.send()
	}
}

// notifyPool wakes every queue of db at once (after a LISTEN connection
// was re-established: notifications sent meanwhile are lost). Parked
// sources are not woken one by one: the pool's prober looks at all their
// queues at once, in one statement, and wakes those with rows.
func (h *hub) notifyPool(db *sql.DB) {
	h.mu.Lock()
	defer h.mu.Unlock()
	probe := false
	for k, q := range h.qs {
		if k.db == db {
			for _, w := range q.ws {
				if w.parked != nil && w.parked.Load() {
					probe = true
					continue
				}
				w.send()
			}
		}
	}
	if probe && !probeSoon(db) {
		for k, q := range h.qs { // no prober: wake everyone after all
			if k.db == db {
				for _, w := range q.ws {
					w.send()
				}
			}
		}
	}
}

// listeners holds one wake-up listener per pool, shared by every
// subscriber on that pool (reference counted): one dedicated connection per
// pool at most.
var (
	listenersMu sync.Mutex
	listeners   = map[*sql.DB]*listener{}
)

// acquireListener returns the pool's listener, starting it if needed;
// release it with releaseListener.
func acquireListener(db *sql.DB, n Notifier, logger watermill.LoggerAdapter) *listener {
	listenersMu.Lock()
	defer listenersMu.Unlock()
	l := listeners[db]
	if l == nil {
		l = startListener(db, n, logger)
		listeners[db] = l
	}
	l.refs++
	return l
}

func releaseListener(db *sql.DB, l *listener) {
	listenersMu.Lock()
	l.refs--
	last := l.refs == 0
	if last {
		delete(listeners, db)
	}
	listenersMu.Unlock()
	if last {
		l.close()
	}
}

// listener runs a dialect Notifier on one dedicated connection, feeding the
// process-wide hub, and reconnects with backoff (reconnectBackoff) until
// stopped.
type listener struct {
	refs   int // guarded by listenersMu
	stop   context.CancelFunc
	done   chan struct{}
	logger watermill.LoggerAdapter
}

func startListener(db *sql.DB, n Notifier, logger watermill.LoggerAdapter) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{stop: cancel, done: make(chan struct{}), logger: logger}
	go l.run(ctx, db, n)
	return l
}

// reconnectBackoff spaces the wake-up listener's reconnects: 50–100 ms
// before the first, doubling up to 15–30 s. A connection that lasted
// reconnectReset starts over from the first.
var reconnectBackoff = ibackoff.Policy{Base: 100 * time.Millisecond, Max: 30 * time.Second}

const reconnectReset = time.Minute

func (l *listener) run(ctx context.Context, db *sql.DB, n Notifier) {
	defer close(l.done)
	failures := 0 // reconnects since the last connection that lasted
	for ctx.Err() == nil {
		start := time.Now()
		conn, err := db.Conn(ctx)
		if err == nil {
			// Notifications sent while we were not listening are lost: wake
			// every local source once, so none waits for its poll.
			localWake.notifyPool(db)
			err = n.Listen(ctx, conn, newWakeSession(localWake, db))
			localWake.endSession(db)
			// Never return a LISTENing connection to the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			_ = conn.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > reconnectReset {
			failures = 0
		}
		wait := reconnectBackoff.Delay(failures)
		failures++
		guard.Do(func() {
			l.logger.Info("wake-up listener lost its connection; polling until it reconnects", watermill.LogFields{"error": err, "retry_in": wait})
		})
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (l *listener) close() {
	l.stop()
	<-l.done
}
