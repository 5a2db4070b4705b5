package sqlqueue

import (
	"database/sql"
	"io"
	"sync"
)

// PoolOpener is implemented by dialects whose package keeps process-wide
// pools: with SubscriberConfig.DB (PublisherConfig.DB) nil, the
// constructors take a reference to the pool of DSN from it, and drop it on
// Close.
type PoolOpener interface {
	// SharedPool returns the process-wide pool of dsn, sized to at least
	// maxConns connections (the dialect's default when 0), and a closer
	// that drops this reference: the last one closes the pool. An invalid
	// maxConns or dsn is an error wrapping transport.ErrInvalidConfig that
	// names the field (MaxOpenConns, DSN).
	SharedPool(dsn string, maxConns int) (*sql.DB, io.Closer, error)
}

// SharedPools keeps one database/sql pool per DSN in a process, reference
// counted, so that the many publishers and subscribers a service opens by
// URL (Watermill's router opens one subscriber per handler) share one pool
// that fits the server's connection limit instead of opening one each.
// Dialect packages hold one SharedPools each; the zero value is not ready:
// set Open.
type SharedPools struct {
	// Open opens a pool of dsn with at most maxConns connections.
	Open func(dsn string, maxConns int) (*sql.DB, error)
	// Default is the pool size asked for with maxConns ≤ 0.
	Default int
	// Min is the smallest pool size (PostgreSQL: 2, its wake-up listener
	// holds one connection).
	Min int

	mu    sync.Mutex
	pools map[string]*sharedPool
}

type sharedPool struct {
	dsn   string
	db    *sql.DB
	conns int // guarded by SharedPools.mu
	refs  int // guarded by SharedPools.mu
}

// Get returns the process-wide pool of dsn, sized to at least maxConns
// (the largest size any user asked for), and a closer that drops this
// user's reference: the last one closes the pool.
func (s *SharedPools) Get(dsn string, maxConns int) (*sql.DB, io.Closer, error) {
	if maxConns <= 0 {
		maxConns = s.Default
	}
	maxConns = max(maxConns, s.Min, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pools[dsn]; p != nil {
		p.refs++
		if maxConns > p.conns {
			p.conns = maxConns
			p.db.SetMaxOpenConns(maxConns)
			p.db.SetMaxIdleConns(maxConns)
		}
		return p.db, &poolRef{s: s, p: p}, nil
	}
	db, err := s.Open(dsn, maxConns)
	if err != nil {
		return nil, nil, err
	}
	if s.pools == nil {
		s.pools = map[string]*sharedPool{}
	}
	p := &sharedPool{dsn: dsn, db: db, conns: maxConns, refs: 1}
	s.pools[dsn] = p
	return db, &poolRef{s: s, p: p}, nil
}

// Len returns how many pools are open.
func (s *SharedPools) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pools)
}

// poolRef is one user's reference to a shared pool.
type poolRef struct {
	s    *SharedPools
	p    *sharedPool
	once sync.Once
}

// Close drops the reference; the last one closes the pool. Idempotent.
func (r *poolRef) Close() error {
	var err error
	r.once.Do(func() {
		r.s.mu.Lock()
		r.p.refs--
		last := r.p.refs == 0
		if last {
			delete(r.s.pools, r.p.dsn)
		}
		r.s.mu.Unlock()
		if last {
			err = r.p.db.Close()
		}
	})
	return err
}
