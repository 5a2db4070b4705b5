package sqlqueue

import (
	"context"
	"database/sql"
)

// SweepSplitter is implemented by dialects whose sweep statements should
// each run in a transaction of their own (SQL Server: the rows one
// statement locks are then released when it commits, rather than held
// while the sweep's other statements run). The engine's default runs a
// whole sweep in one transaction.
type SweepSplitter interface {
	// SplitSweep reports whether each sweep statement runs in its own
	// transaction.
	SplitSweep() bool
}

// sweepApart runs each step of a sweep in a transaction of its own, which
// first takes the sweep lock without waiting; a step whose lock is held
// elsewhere ends the sweep (another instance is sweeping the queue, and
// takes the rest). Another instance may sweep between two steps: each
// statement skips the rows others hold (READPAST), so the two share out
// the work rather than repeat it. A failed step returns its error;
// Sweep's retry runs the sweep again from its first step, which finds
// only what the steps before did not commit.
func (s *Source) sweepApart(ctx context.Context, res *SweepResult, steps []func(*sql.Tx) error) error {
	rt := &s.e.ctrs.sweeps
	for _, step := range steps {
		held := false
		err := inTx(ctx, s.e.db, &s.e.ctrs.txs, func(tx *sql.Tx) error {
			ok, err := lockAcquired(ctx, tx, rt, s.e.d.Lock(s.e.lockKey("sweep:"+s.q.Name), false))
			if err != nil || !ok {
				return err
			}
			held = true
			return step(tx)
		})
		if err != nil {
			return err
		}
		if !held {
			return nil
		}
		res.Ran = true
	}
	return nil
}
