package sqlqueue

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/internal/guard"
)

// StatsDialect is implemented by dialects whose planner picks the claim's
// plan from the queue table's column statistics (PostgreSQL). A new table
// has none until autovacuum first analyzes it, at its next visit of the
// database (up to autovacuum_naptime, a minute by default, after rows
// arrive), and without them the planner guesses: it takes a fraction of a
// percent of the rows for pending, and may read and sort every pending
// row for each claim instead of walking the pending index in order (a
// burst of 50,000 rows into a new table: claims of 64 rows at 20–150 ms
// instead of ~2).
//
// Statistics can also be out of date for the plans that use them: a
// connection keeps a statement's generic plan, and one made while the
// table held a page or two reads the whole table, which it goes on doing
// as a burst fills it (see the PostgreSQL dialect's HasStats). An ANALYZE
// makes every connection plan its statements again.
//
// So a source checks, in the background, after a claim that comes back
// full (see checkStats), and gathers them when the table has none or has
// grown well past the size they were gathered at.
type StatsDialect interface {
	// HasStats returns a read-only statement answering one row with one
	// boolean: whether the queue table's state column has statistics that
	// its present size does not make stale.
	HasStats(q Queue) Stmt
	// Analyze returns the statement that gathers the queue table's
	// statistics; it runs inside a transaction (after Lock). It must not
	// block the queue's claims, settlements or inserts.
	Analyze(q Queue) Stmt
}

// statsCheckEvery is how often a source whose claims keep coming back
// full checks the statistics again (a backlog that grows slowly while the
// claims stay at their cap); statsCheckFrom is the least claim size that
// checks as soon as it grows.
const (
	statsCheckEvery = time.Minute
	statsCheckFrom  = 8
)

// checkStats starts the check that the queue table has current planner
// statistics (ensureStats), in the background, only with a StatsDialect,
// after a full claim of n rows: the source's first, any statsCheckEvery
// after the last check, or one of at least statsCheckFrom rows that asked
// for more rows than the claim of the last check; never while a check
// runs. A burst's claims double from one row, so once the last check is a
// minute old its first claims check as the table fills (at 1, 8, 16, 32
// rows and so on); under a steady load, whose claims come back full at
// sizes that come and go, a check follows each new high within the
// minute, a handful a minute at most. Each check is one catalog read. The
// claim that triggered it returns at once. A source that is closing
// starts nothing; Close waits for a check under way and cancels its
// statements.
func (s *Source) checkStats(n int) {
	sd, ok := s.e.d.(StatsDialect)
	if !ok {
		return
	}
	now := time.Now().UnixNano()
	last := s.statsAt.Load()
	grew := n >= statsCheckFrom && int64(n) > s.statsN.Load()
	if last != 0 && !grew && now-last < int64(statsCheckEvery) {
		return
	}
	if !s.statsBusy.CompareAndSwap(false, true) {
		return
	}
	s.statsAt.Store(now)
	s.statsN.Store(int64(n))
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.bgClosed {
		s.statsBusy.Store(false)
		return
	}
	s.swept.Add(1)
	go func() {
		defer s.swept.Done()
		defer s.statsBusy.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StatementTimeout)
		defer cancel()
		go func() { // ends with ctx: the deferred cancel
			select {
			case <-s.stopSweep:
				cancel()
			case <-ctx.Done():
			}
		}()
		analyzed, err := s.ensureStats(ctx, sd)
		switch {
		case err != nil && ctx.Err() == nil:
			guard.Do(func() { s.logger.Error("checking the queue table's planner statistics failed", err, nil) })
		case analyzed:
			guard.Do(func() {
				s.logger.Debug("gathered the queue table's planner statistics (it had none, or none for its present size)", watermill.LogFields{"table": s.q.Table})
			})
		}
	}()
}

// ensureStats runs ANALYZE on the queue table when it has no current
// statistics (StatsDialect.HasStats), and reports whether it did.
// Instances that find them missing together analyze the table once: under
// a cluster lock taken without waiting (the others skip), after a second
// look (one may have just finished).
func (s *Source) ensureStats(ctx context.Context, sd StatsDialect) (bool, error) {
	has, err := s.hasStats(ctx, s.e.db, sd)
	if err != nil || has {
		return false, err
	}
	analyzed := false
	err = inTx(ctx, s.e.db, &s.e.ctrs.txs, func(tx *sql.Tx) error {
		ok, err := lockAcquired(ctx, tx, &s.e.ctrs.other, s.e.d.Lock(s.e.lockKey("analyze:"+s.q.Name), false))
		if err != nil || !ok {
			return err
		}
		if has, err := s.hasStats(ctx, tx, sd); err != nil || has {
			return err
		}
		if err := query(ctx, tx, &s.e.ctrs.other, sd.Analyze(s.q), nil); err != nil {
			return fmt.Errorf("sqlqueue: analyze %s: %w", s.q.Name, err)
		}
		analyzed = true
		return nil
	})
	if err != nil || !analyzed {
		return false, err
	}
	s.e.ctrs.analyzes.Add(1)
	return true, nil
}

func (s *Source) hasStats(ctx context.Context, q querier, sd StatsDialect) (bool, error) {
	var has bool
	if err := query(ctx, q, &s.e.ctrs.other, sd.HasStats(s.q), func(r *sql.Rows) error { return r.Scan(&has) }); err != nil {
		return false, fmt.Errorf("sqlqueue: statistics of %s: %w", s.q.Name, err)
	}
	return has, nil
}
