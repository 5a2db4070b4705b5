package sqlqueue

import (
	"container/list"
	"context"
	"database/sql"
	"sync"
)

// A PreparedDialect is a Dialect whose driver parses a statement each time
// it runs unless it was prepared: the engine then runs its hot statements
// (claims, the lease gate, settlements, single-statement inserts) through
// a stmtCache. SQLite is
// one: its parser was 23–30% of the CPU of a drain (profiled, 20,000
// messages, 4 instances × 64), and preparing once made the drain about
// 12% faster. pgx caches prepared statements itself.
type PreparedDialect interface {
	Dialect
	// PrepareStatements reports whether the engine should prepare its hot
	// statements once per text and connection.
	PrepareStatements() bool
}

// stmtCacheSize bounds the statement texts a stmtCache keeps prepared: a
// settlement's text varies with its batch size, a key claim's with its
// number of keys.
const stmtCacheSize = 256

// stmtCacheBytes bounds the summed length of the texts a stmtCache keeps.
// A prepared statement holds about fifteen bytes of SQLite's memory per byte
// of text (a 100-row insert: 17 KB of text, ~150 KB prepared), so a count
// alone let a publisher of batches of many sizes keep stmtCacheSize large
// programs (37.7 MB after 300 keyed batches of 100 rows,
// TestKeyedBatchesKeepStatementMemory). 256 KB of text keeps the claims
// and many settlements (1–4 KB each) and a few dozen large inserts: reusing a
// 100-row insert's statement doubles a batch publish's rate
// (BenchmarkPublishBatchKeyed), so large texts are worth keeping while
// they are reused.
const stmtCacheBytes = 256 << 10

// stmtCache is a querier over a *sql.DB that prepares each statement text
// once (database/sql then prepares it once per connection) and keeps the
// most recently used texts, at most stmtCacheSize of them and
// stmtCacheBytes in all; a text longer than an eighth of that is prepared
// for its run and closed. Evicting a statement closes it; database/sql
// keeps it open for queries still reading its rows.
type stmtCache struct {
	db       *sql.DB
	max      int // texts kept, stmtCacheSize
	maxBytes int // their summed length, stmtCacheBytes
	mu       sync.Mutex
	bytes    int        // summed length of the texts kept
	ll       *list.List // of *cachedStmt, most recently used first
	m        map[string]*list.Element
}

type cachedStmt struct {
	text    string
	st      *sql.Stmt
	users   int  // callers between stmt and done
	evicted bool // out of the cache: closed when the last user is done
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, max: stmtCacheSize, maxBytes: stmtCacheBytes, ll: list.New(), m: map[string]*list.Element{}}
}

// QueryContext implements querier.
func (c *stmtCache) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if !c.keeps(query) {
		// The rows keep the statement open until they are closed.
		st, err := c.db.PrepareContext(ctx, query)
		if err != nil {
			return nil, err
		}
		defer st.Close()
		return st.QueryContext(ctx, args...)
	}
	e, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	defer c.done(e)
	return e.st.QueryContext(ctx, args...)
}

// stmt returns query's statement, prepared now unless cached, counted as
// used until done: an eviction meanwhile does not close it under the
// caller (rows already returned keep it open by themselves).
func (c *stmtCache) stmt(ctx context.Context, query string) (*cachedStmt, error) {
	if e := c.lookup(query); e != nil {
		return e, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[query]; ok { // prepared meanwhile by another caller
		_ = st.Close()
		return c.use(el), nil
	}
	e := &cachedStmt{text: query, st: st, users: 1}
	c.m[query] = c.ll.PushFront(e)
	c.bytes += len(query)
	for c.ll.Len() > c.max || c.bytes > c.maxBytes {
		old := c.ll.Remove(c.ll.Back()).(*cachedStmt)
		delete(c.m, old.text)
		c.bytes -= len(old.text)
		old.evicted = true
		if old.users == 0 {
			_ = old.st.Close()
		}
	}
	return e, nil
}

// lookup returns query's statement when it is cached, counted as used
// until done; nil otherwise.
func (c *stmtCache) lookup(query string) *cachedStmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[query]
	if !ok {
		return nil
	}
	return c.use(el)
}

// use marks el's statement most recently used and counts a use of it,
// until done. c.mu is held.
func (c *stmtCache) use(el *list.Element) *cachedStmt {
	c.ll.MoveToFront(el)
	e := el.Value.(*cachedStmt)
	e.users++
	return e
}

// keeps reports whether the cache keeps query prepared: texts longer than
// an eighth of maxBytes are prepared for their run only.
func (c *stmtCache) keeps(query string) bool { return len(query) <= c.maxBytes/8 }

// done ends a use of e that stmt or lookup counted.
func (c *stmtCache) done(e *cachedStmt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.users--
	if e.evicted && e.users == 0 {
		_ = e.st.Close()
	}
}

// inTx returns a querier that runs statements in tx through c: a text
// already prepared runs as that statement (database/sql reuses it on the
// transaction's connection); a new one runs in tx unprepared, and is
// prepared by prepareMissed once tx has ended (preparing on the pool while
// tx holds SQLite's one connection would wait for it forever).
func (c *stmtCache) inTx(tx *sql.Tx) *txStmts { return &txStmts{c: c, tx: tx} }

// txStmts is stmtCache.inTx's querier.
type txStmts struct {
	c      *stmtCache
	tx     *sql.Tx
	missed []string
}

// QueryContext implements querier.
func (t *txStmts) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	e := t.c.lookup(query)
	if e == nil {
		if t.c.keeps(query) {
			t.missed = append(t.missed, query)
		}
		return t.tx.QueryContext(ctx, query, args...)
	}
	defer t.c.done(e)
	return t.tx.StmtContext(ctx, e.st).QueryContext(ctx, args...)
}

// prepareMissed prepares the texts QueryContext ran unprepared, for the
// next transaction; a failure only leaves a text unprepared.
func (t *txStmts) prepareMissed(ctx context.Context) {
	for _, q := range t.missed {
		if e, err := t.c.stmt(ctx, q); err == nil {
			t.c.done(e)
		}
	}
	t.missed = nil
}
