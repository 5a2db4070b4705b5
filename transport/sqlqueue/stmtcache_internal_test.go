package sqlqueue

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

func TestStmtCache(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO t (id) VALUES (1), (2), (3)`); err != nil {
		t.Fatal(err)
	}
	c := newStmtCache(db)
	c.max = 4
	count := func(q querier, text string) int {
		t.Helper()
		n, err := queryCount(ctx, q, new(atomic.Int64), Stmt{SQL: text})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// One text is prepared once and answers like the database.
	text := `SELECT id FROM t WHERE id >= ?`
	e1, err := c.stmt(ctx, text)
	if err != nil {
		t.Fatal(err)
	}
	c.done(e1)
	e2, _ := c.stmt(ctx, text)
	c.done(e2)
	if e2.st != e1.st {
		t.Fatal("the same text was prepared twice")
	}
	rows, err := c.QueryContext(ctx, text, 2)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Close(); err != nil || n != 2 {
		t.Fatalf("rows = %d, %v; want 2", n, err)
	}

	// Rows still open when their statement is evicted stay readable.
	open, err := c.QueryContext(ctx, text, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 { // evicts text
		if got := count(c, fmt.Sprintf(`SELECT id FROM t WHERE id > %d -- %d`, i%3, i)); got != 3-i%3 {
			t.Fatalf("text %d: %d rows", i, got)
		}
	}
	if c.ll.Len() != 4 || len(c.m) != 4 {
		t.Fatalf("cache holds %d texts (%d in its map), want 4", c.ll.Len(), len(c.m))
	}
	if _, ok := c.m[text]; ok {
		t.Fatal("the least recently used text was not evicted")
	}
	n = 0
	for open.Next() {
		n++
	}
	if err := open.Close(); err != nil || n != 3 {
		t.Fatalf("rows of an evicted statement = %d, %v; want 3", n, err)
	}

	// A statement evicted while a caller holds it stays open until done.
	held, err := c.stmt(ctx, `SELECT id FROM t -- held`)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		count(c, fmt.Sprintf(`SELECT id FROM t -- evict %d`, i))
	}
	if !held.evicted {
		t.Fatal("the held statement was not evicted")
	}
	heldRows, err := held.st.QueryContext(ctx)
	if err != nil {
		t.Fatalf("an evicted statement in use: %v", err)
	}
	_ = heldRows.Close()
	c.done(held)
	if _, err := held.st.QueryContext(ctx); err == nil {
		t.Fatal("an evicted statement stayed open after its last use")
	}

	// Concurrent callers (run with -race) share the cache.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if got := count(c, fmt.Sprintf(`SELECT id FROM t WHERE id > %d`, (g+i)%6)); got != max(0, 3-(g+i)%6) {
					t.Errorf("concurrent text: %d rows", got)
					return
				}
			}
		}()
	}
	wg.Wait()

	// A text longer than an eighth of the byte budget runs, and is not
	// kept; the texts kept stay within the budget.
	long := `SELECT id FROM t WHERE id >= 2 -- ` + strings.Repeat("x", c.maxBytes/8)
	if got := count(c, long); got != 2 {
		t.Fatalf("long text: %d rows, want 2", got)
	}
	if _, ok := c.m[long]; ok {
		t.Fatal("a text longer than an eighth of the budget was kept")
	}
	c.maxBytes = 800 // texts of ~90 bytes: an eighth is 100
	for i := range 20 {
		count(c, fmt.Sprintf(`SELECT id FROM t WHERE id > %d -- padded to ninety bytes with this comment: %03d`, i%3, i))
	}
	sum := 0
	for el := c.ll.Front(); el != nil; el = el.Next() {
		sum += len(el.Value.(*cachedStmt).text)
	}
	if sum != c.bytes || c.bytes > c.maxBytes || c.ll.Len() < 4 {
		t.Fatalf("cache holds %d texts of %d bytes (counted %d), want at least 4 within %d", c.ll.Len(), sum, c.bytes, c.maxBytes)
	}

	// A text that does not prepare is an error, and is not kept.
	if _, err := c.QueryContext(ctx, `SELECT nope FROM missing`); err == nil {
		t.Fatal("a statement over a missing table prepared")
	}
	if _, ok := c.m[`SELECT nope FROM missing`]; ok {
		t.Fatal("a failed text was kept")
	}
}

// TestStmtCacheInTx runs statements in transactions through the cache on a
// pool of one connection, as SQLite's: a new text runs unprepared (to
// prepare it on the pool would wait for the connection the transaction
// holds) and is prepared once the transaction ends; the next transaction
// runs it as the cached statement.
func TestStmtCacheInTx(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	c := newStmtCache(db)
	text := `INSERT INTO t (id) VALUES (?) RETURNING id`
	for i := range 3 {
		var ts *txStmts
		err := inTx(ctx, db, new(atomic.Int64), func(tx *sql.Tx) error {
			ts = c.inTx(tx)
			return query(ctx, ts, new(atomic.Int64), Stmt{SQL: text, Args: []any{i + 1}}, nil)
		})
		if err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
		if wantMissed := i == 0; (len(ts.missed) == 1) != wantMissed {
			t.Fatalf("transaction %d: missed %q", i, ts.missed)
		}
		ts.prepareMissed(ctx)
		if _, ok := c.m[text]; !ok {
			t.Fatalf("transaction %d: the text is not cached after it", i)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("rows = %d, %v; want 3", n, err)
	}
}
