package sqlqueue

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// localWake is the process-wide notifier: publishers in this process wake
// the sources of the queue tables they inserted into. It is keyed by the
// unquoted table name only; a wake-up for a same-named table in another
// database costs one empty claim.
var localWake = &hub{subs: map[string]map[chan struct{}]struct{}{}}

type hub struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

func (h *hub) add(table string, ch chan struct{}) (remove func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.subs[table]
	if m == nil {
		m = map[chan struct{}]struct{}{}
		h.subs[table] = m
	}
	m[ch] = struct{}{}
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs[table], ch)
		if len(h.subs[table]) == 0 {
			delete(h.subs, table)
		}
	}
}

// notify wakes every source of table without blocking; a source already
// holding a wake-up keeps one (debounced).
func (h *hub) notify(table string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[table] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (h *hub) notifyAll() {
	h.mu.Lock()
	tables := make([]string, 0, len(h.subs))
	for t := range h.subs {
		tables = append(tables, t)
	}
	h.mu.Unlock()
	for _, t := range tables {
		h.notify(t)
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
			localWake.notifyAll()
			err = n.Listen(ctx, conn, localWake.notify)
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
