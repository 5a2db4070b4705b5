package sqlqueue

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	ibackoff "github.com/berth-go/berth/internal/backoff"
	"github.com/berth-go/berth/internal/guard"
)

// sweepLimit bounds the rows one sweep statement touches; a full batch
// makes the next sweep start at once.
const sweepLimit = 1000

// SweepResult counts what one sweep did.
type SweepResult struct {
	Ran          bool // false when another instance held the sweep lock
	Recovered    int  // rows returned to pending
	DeadLettered int  // processing rows whose last attempt's lease expired
	Expired      int  // pending rows dropped past their time-to-live
	// Stray counts rows moved to the error table because no statement
	// would ever touch them: a fetched or processing row without a lease
	// or an owner, or a state the engine does not know
	// (Dialect.DeadLetterStray).
	Stray int
	// Promoted counts waiting rows found heading their key with no
	// hand-off coming, made claimable (HeadPromoter.PromoteHeads).
	Promoted int
}

// sweepLoop sweeps every SweepInterval ± 25% (on the pipeline's clock)
// until stopSweep closes. Its logging is guarded: a logger that panics
// costs the log line, never the loop or the process.
func (s *Source) sweepLoop() {
	defer s.swept.Done()
	clock := s.cfg.Pipeline.Clock
	next := ibackoff.Spread(s.cfg.SweepInterval)
	var pruned time.Time // the last prune of the topic's parked messages
	for {
		select {
		case <-s.stopSweep:
			return
		case <-clock.After(next):
		}
		next = ibackoff.Spread(s.cfg.SweepInterval)
		if now := clock.Now(); now.Sub(pruned) >= s.pruneEvery() {
			// Not skipped when idle: a group idle for days still prunes.
			pruned = now
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StatementTimeout)
			n, err := s.PruneParked(ctx)
			cancel()
			switch {
			case err != nil:
				guard.Do(func() { s.logger.Error("prune parked messages failed", err, nil) })
			case n > 0:
				guard.Do(func() {
					s.logger.Info("pruned parked messages past ParkedRetention", watermill.LogFields{"topic": s.q.Topic, "pruned": n})
				})
			}
		}
		if s.idleClean(s.cfg.SweepInterval) {
			s.e.ctrs.skippedSweeps.Add(1)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StatementTimeout)
		res, err := s.Sweep(ctx)
		cancel()
		switch {
		case err != nil:
			guard.Do(func() { s.logger.Error("sweep failed", err, nil) })
		case res.Recovered+res.DeadLettered+res.Expired+res.Stray+res.Promoted > 0:
			guard.Do(func() {
				fields := watermill.LogFields{"recovered": res.Recovered, "dead_lettered": res.DeadLettered, "expired": res.Expired, "stray": res.Stray, "promoted": res.Promoted}
				if res.Stray > 0 {
					// Rows written by something else than Berth: worth a look.
					s.logger.Info("swept stray rows into the error table", fields)
				} else {
					s.logger.Debug("swept", fields)
				}
			})
			if res.Recovered == sweepLimit || res.DeadLettered == sweepLimit || res.Expired == sweepLimit || res.Stray == sweepLimit || res.Promoted == sweepLimit {
				next = 0
			}
		}
	}
}

// idleClean reports whether a sweep would find nothing: this source is
// parked (idle) and a probe of the pool's prober saw the queue table empty
// at most interval + IdleProbeMax ago. A row leased since then by another
// process is seen by the next probe (within IdleProbeMax), and its lease
// cannot expire before the fetch timeout, so skipping delays no recovery
// by more than IdleProbeMax.
func (s *Source) idleClean(interval time.Duration) bool {
	if s.idle == nil || !s.parked.Load() {
		return false
	}
	return s.idle.cleanSince(s.q.Name, s.cfg.Pipeline.Clock.Now().Add(-interval-s.cfg.IdleProbeMax))
}

// Sweep runs one sweep of the queue now, if no other instance is sweeping
// it (a zero-wait cluster lock), in one transaction (for a SweepSplitter,
// one per statement, each taking the lock): stray rows (a fetched
// or processing state without a lease or an owner, or an unknown state: written by
// another tool or a bad migration, they would never be delivered,
// recovered or dead-lettered) go to the error table with a reason; rows
// whose fetch timeout or processing lease expired return to pending
// (attempts unchanged), or go to the error table when their expired
// attempt was the last (MaxAttempts); pending rows past their time-to-live
// are dropped and counted. Any recovered row wakes this source's receive
// loop.
func (s *Source) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	// A transient error runs the whole sweep again, in a new transaction:
	// each of its statements selects by state and time, so a second run
	// finds only what the first did not commit.
	err := s.e.retry(ctx, s.logger, "sweep", idempotent, func() error {
		res = SweepResult{}
		return s.sweep(ctx, &res)
	})
	if err != nil {
		return SweepResult{}, fmt.Errorf("sqlqueue: sweep %s: %w", s.q.Name, err)
	}
	s.e.ctrs.recovered.Add(int64(res.Recovered))
	s.e.ctrs.deadLettered.Add(int64(res.DeadLettered + res.Stray))
	s.e.ctrs.stray.Add(int64(res.Stray))
	s.e.ctrs.expired.Add(int64(res.Expired))
	if res.Recovered > 0 {
		s.w.send()
	}
	if hp, ok := s.e.d.(HeadPromoter); ok && res.Ran {
		// Its own statement, after the sweep's transaction: it locks only
		// the rows it changes, and an error costs only itself.
		err := s.e.retry(ctx, s.logger, "promote heads", idempotent, func() error {
			var err error
			res.Promoted, err = queryCount(ctx, s.e.db, &s.e.ctrs.sweeps, hp.PromoteHeads(s.q, sweepLimit))
			return err
		})
		if err != nil {
			return res, fmt.Errorf("sqlqueue: sweep %s: promote heads: %w", s.q.Name, err)
		}
		if res.Promoted > 0 {
			s.w.send()
		}
	}
	return res, nil
}

// sweep runs one sweep into res: its steps in one transaction that holds
// the sweep lock, or, for a SweepSplitter, each step in a transaction of
// its own that takes the lock again (sweepApart).
func (s *Source) sweep(ctx context.Context, res *SweepResult) error {
	rt := &s.e.ctrs.sweeps
	max := s.cfg.Pipeline.MaxAttempts
	// Strays first: Recover would otherwise return a row of an unknown
	// state whose lease_until has passed to pending.
	steps := []func(tx *sql.Tx) error{
		func(tx *sql.Tx) error {
			ids, err := runAll(ctx, tx, rt, s.e.d.DeadLetterStray(s.e.names, s.q, sweepLimit))
			if err != nil {
				return fmt.Errorf("dead-letter stray: %w", err)
			}
			res.Stray = len(ids)
			return nil
		},
		func(tx *sql.Tx) (err error) {
			if res.Recovered, err = queryCount(ctx, tx, rt, s.e.d.Recover(s.q, max, sweepLimit)); err != nil {
				return fmt.Errorf("recover: %w", err)
			}
			return nil
		},
	}
	if max > 0 {
		steps = append(steps, func(tx *sql.Tx) error {
			reason := fmt.Sprintf("processing lease expired on the last attempt (MaxAttempts %d): the handler never settled", max)
			ids, err := runAll(ctx, tx, rt, s.e.d.DeadLetterExpired(s.e.names, s.q, max, reason, sweepLimit))
			if err != nil {
				return fmt.Errorf("dead-letter expired: %w", err)
			}
			res.DeadLettered = len(ids)
			return nil
		})
	}
	steps = append(steps, func(tx *sql.Tx) (err error) {
		if res.Expired, err = queryCount(ctx, tx, rt, s.e.d.DropExpired(s.q, sweepLimit)); err != nil {
			return fmt.Errorf("drop expired: %w", err)
		}
		return nil
	})
	if sp, ok := s.e.d.(SweepSplitter); ok && sp.SplitSweep() {
		return s.sweepApart(ctx, res, steps)
	}
	return inTx(ctx, s.e.db, &s.e.ctrs.txs, func(tx *sql.Tx) error {
		ok, err := lockAcquired(ctx, tx, rt, s.e.d.Lock(s.e.lockKey("sweep:"+s.q.Name), false))
		if err != nil || !ok {
			return err
		}
		res.Ran = true
		for _, step := range steps {
			if err := step(tx); err != nil {
				return err
			}
		}
		return nil
	})
}
