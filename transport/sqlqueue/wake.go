package sqlqueue

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
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
//   - notifications of one key within its debounce window (the smallest
//     SubscriberConfig.WakeDebounce of the key's sources) coalesce into one
//     wake-up, at the end of the window;
//   - that wake-up goes to one source only, the next idle one in
//     round-robin order (idle: its last claim came back empty, so its loop
//     is waiting for a wake-up or its empty delay). A source that is
//     claiming already needs no wake-up;
//   - when no source is idle (all are claiming or busy), every source gets
//     a pending wake-up, so a claim that raced with the insert is followed
//     by one more. Claim drops a pending wake-up at its start: whatever was
//     notified before a claim is covered by it.
var localWake = &hub{qs: map[wakeKey]*wakeQueue{}}

// wakeKey identifies a queue as seen through one pool.
type wakeKey struct {
	db    *sql.DB
	table string
}

type hub struct {
	mu sync.Mutex
	qs map[wakeKey]*wakeQueue
}

// waiter is one source's registration.
type waiter struct {
	ch       chan struct{} // capacity 1: at most one pending wake-up
	idle     atomic.Bool   // the last claim came back empty
	debounce time.Duration // ≤ 0: none
	hint     atomic.Int64  // notifications announced to this source, not yet taken
}

func (w *waiter) send() {
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
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
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
func (h *hub) notify(k wakeKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.qs[k]
	if q == nil || len(q.ws) == 0 {
		return // nobody listens
	}
	q.pending++
	if q.timer != nil {
		return // coalesced into the pending wake-up
	}
	d := q.ws[0].debounce
	for _, w := range q.ws[1:] {
		d = min(d, w.debounce)
	}
	if d <= 0 {
		q.fire()
		return
	}
	q.timer = time.AfterFunc(d, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		q.timer = nil
		q.fire()
	})
}

// fire wakes the next idle source, or every source when none is idle.
// Called with the hub locked.
func (q *wakeQueue) fire() {
	announced := int64(q.pending)
	q.pending = 0
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
// was re-established: notifications sent meanwhile are lost).
func (h *hub) notifyPool(db *sql.DB) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, q := range h.qs {
		if k.db == db {
			for _, w := range q.ws {
				w.send()
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
// process-wide hub, and reconnects with backoff until stopped.
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

func (l *listener) run(ctx context.Context, db *sql.DB, n Notifier) {
	defer close(l.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		conn, err := db.Conn(ctx)
		if err == nil {
			// Notifications sent while we were not listening are lost: wake
			// every local source once, so none waits for its poll.
			localWake.notifyPool(db)
			err = n.Listen(ctx, conn, func(table string) { localWake.notify(wakeKey{db, table}) })
			// Never return a LISTENing connection to the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			_ = conn.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		l.logger.Info("wake-up listener lost its connection; polling until it reconnects", watermill.LogFields{"error": err, "retry_in": backoff})
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func (l *listener) close() {
	l.stop()
	<-l.done
}
