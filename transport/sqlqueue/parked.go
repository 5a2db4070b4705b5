package sqlqueue

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// ParkingDialect is implemented by dialects that keep parked messages for
// consumer groups registered later (see the package documentation,
// Consumer groups): a message published to a topic with no subscription at
// all is parked in the topic's default queue, and a consumer group's first
// registration copies the parked rows into its own queue. Registration and
// the parked publish are serialised by a per-topic lock, so that no
// message is parked after a group registered.
type ParkingDialect interface {
	// SharedLock is Lock(key, true) in shared mode: any number of
	// transactions hold it together, none while one holds Lock(key, …).
	// A database without shared locks may return Lock(key, true); one
	// whose transactions are already exclusive may select 1.
	SharedLock(key string) Stmt
	// Register records q (q.Group != "") in the subscriptions table, as
	// Subscribe does, and returns one row with one integer: non-zero when
	// it inserted the row and the topic has no default-reader subscription
	// (group ""), that is when the parked rows must be copied; zero, or no
	// row, otherwise.
	Register(n Names, q Queue) Stmt
	// CopyParked inserts into to a copy of every pending, unexpired row of
	// from, in id order: uuid, headers, body, created_at, due_at,
	// expires_at and ordering_key kept, state pending, attempts 0. It
	// returns no rows.
	CopyParked(from, to Queue) Stmt
	// PruneParked deletes, unless the topic has a default-reader
	// subscription, at most limit pending rows of q (a default queue)
	// created more than retention ago, examining no more than the limit
	// oldest rows of q (by id), skipping rows locked by others. One result
	// row per row deleted.
	PruneParked(n Names, q Queue, retention time.Duration, limit int) Stmt
}

// topicLockKey is the lock serialising the registration of a topic's
// consumer groups with the parked publishes of the topic.
func (e *engine) topicLockKey(topic string) string { return e.lockKey("topic:" + topic) }

// register records q's subscription in tx under the topic lock and, on the
// group's first registration while the topic has no default reader,
// copies the rows parked in the topic's default queue into q.
func (e *engine) register(ctx context.Context, tx *sql.Tx, pd ParkingDialect, q Queue) error {
	if _, err := lockAcquired(ctx, tx, &e.ctrs.other, e.d.Lock(e.topicLockKey(q.Topic), true)); err != nil {
		return fmt.Errorf("topic lock: %w", err)
	}
	first := false
	err := query(ctx, tx, &e.ctrs.other, pd.Register(e.names, q), func(r *sql.Rows) error {
		var v int64
		if err := r.Scan(&v); err != nil {
			return err
		}
		first = first || v != 0
		return nil
	})
	if err != nil || !first {
		return err
	}
	dq := e.queue(q.Topic, "")
	if qc, ok := e.d.(QueueChecker); ok && e.tables.ManualSchema {
		// Tables by hand: a topic whose default queue was never created
		// parked nothing.
		exists := false
		if err := query(ctx, tx, &e.ctrs.other, qc.QueueExists(dq), func(r *sql.Rows) error { return r.Scan(&exists) }); err != nil {
			return err
		}
		if !exists {
			return nil
		}
	}
	if err := query(ctx, tx, &e.ctrs.other, pd.CopyParked(dq, q), nil); err != nil {
		return fmt.Errorf("copy parked messages of %q: %w", q.Topic, err)
	}
	return nil
}

// pruneLimit bounds the rows one prune statement examines and deletes.
const pruneLimit = 1000

// PruneParked deletes the rows parked in the default queue of the
// source's topic for longer than SubscriberConfig.ParkedRetention (see the
// package documentation, Consumer groups), at most 1,000 per call, and
// returns how many it deleted. It does nothing for a source of the default
// queue, when retention is negative (keep forever), when the topic has a
// default reader, or when the dialect parks nothing (no ParkingDialect).
// Sources of a consumer group call it from their sweep loop.
func (s *Source) PruneParked(ctx context.Context) (int, error) {
	pd, ok := s.e.d.(ParkingDialect)
	if !ok || s.q.Group == "" || s.cfg.ParkedRetention < 0 {
		return 0, nil
	}
	dq := s.e.queue(s.q.Topic, "")
	var n int
	err := s.e.retry(ctx, s.logger, "prune parked", idempotent, func() error {
		var err error
		n, err = queryCount(ctx, s.e.db, &s.e.ctrs.sweeps, pd.PruneParked(s.e.names, dq, s.cfg.ParkedRetention, pruneLimit))
		return err
	})
	if err != nil {
		return 0, s.e.wrapQueueErr(dq, fmt.Errorf("sqlqueue: prune parked messages of %q: %w", s.q.Topic, err))
	}
	s.e.ctrs.pruned.Add(int64(n))
	return n, nil
}

// pruneEvery is how often a consumer group's sweep loop prunes the parked
// messages of its topic: every sweep interval, at least a minute apart
// (a tenth of the retention when that is shorter).
func (s *Source) pruneEvery() time.Duration {
	return max(s.cfg.SweepInterval, min(time.Minute, s.cfg.ParkedRetention/10))
}

// RegisterGroup registers consumer group of topic on db, as a subscriber's
// SubscribeInitialize does: the shared tables and the group's queue table
// are created or upgraded (unless t.ManualSchema), the subscription is
// recorded, and on the group's first registration the messages parked in
// the topic's default queue are copied to it (see the package
// documentation, Consumer groups). From then on every Publish to topic
// reaches the group. With group "" it creates the default queue only: a
// default queue is read by a Subscribe without a group, not registered.
// For tools (berth migrate --queue topic:group).
func RegisterGroup(ctx context.Context, d Dialect, db *sql.DB, t Tables, topic, group string) error {
	e := newEngine(db, d, t)
	return e.ensureQueue(ctx, e.queue(topic, group), group != "")
}
