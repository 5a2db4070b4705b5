package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// Listener is one row of the fleet's listeners table: a running
// subscriber's listener as it last reported itself (see
// sqlqueue.SubscriberConfig.FleetInterval).
type Listener = sqlqueue.ListenerRow

// PausedQueue is one queue paused fleet-wide.
type PausedQueue = sqlqueue.PausedQueue

// Listeners returns every listener the deployment's subscribers report,
// and the database's clock when it read them (to measure staleness
// against: a row older than three of its Interval is stale). None when no
// subscriber reports (FleetInterval unset) or the dialect keeps no fleet
// tables.
func (s *SQL) Listeners(ctx context.Context) ([]Listener, time.Time, error) {
	return sqlqueue.ReadListeners(ctx, s.DB, s.Dialect, s.Names)
}

// Paused returns the queues paused fleet-wide.
func (s *SQL) Paused(ctx context.Context) ([]PausedQueue, error) {
	return sqlqueue.PausedQueues(ctx, s.DB, s.Dialect, s.Names)
}

// Pause pauses the queue name (a queue table, or a topic's default queue)
// fleet-wide: within one FleetInterval every reporting subscriber's
// listeners of it release their prefetched rows and stop claiming. by
// records who or why. It returns the queue table and whether it was not
// paused already. An unknown queue is an error wrapping
// transport.ErrQueueNotFound.
func (s *SQL) Pause(ctx context.Context, name, by string) (queue string, changed bool, err error) {
	q, err := s.Queue(ctx, name)
	if err != nil {
		return "", false, err
	}
	if q.Missing {
		return "", false, fmt.Errorf("%w: %q has no table", transport.ErrQueueNotFound, name)
	}
	changed, err = sqlqueue.PauseQueue(ctx, s.DB, s.Dialect, s.Names, q.Queue, by)
	return q.Queue, changed, err
}

// Resume undoes Pause: the queue's listeners claim again within one
// FleetInterval. A paused queue whose table is gone can be resumed by its
// table name. It returns the queue table and whether it was paused.
func (s *SQL) Resume(ctx context.Context, name string) (queue string, changed bool, err error) {
	ps, err := s.Paused(ctx)
	if err != nil {
		return "", false, err
	}
	queue = name
	found := false
	for _, p := range ps {
		if p.Queue == name {
			found = true
		}
	}
	if !found {
		q, err := s.Queue(ctx, name)
		if err != nil {
			return "", false, err
		}
		queue = q.Queue
	}
	changed, err = sqlqueue.ResumeQueue(ctx, s.DB, s.Dialect, s.Names, queue)
	return queue, changed, err
}

// markPaused sets Paused on the queues of qs paused fleet-wide: one read
// of the paused table (none when the table does not exist).
func (s *SQL) markPaused(ctx context.Context, qs []QueueStats) error {
	if _, ok := s.Dialect.(sqlqueue.FleetDialect); !ok || len(qs) == 0 {
		return nil
	}
	ps, err := s.Paused(ctx)
	if err != nil {
		return fmt.Errorf("read paused queues: %w", err)
	}
	by := make(map[string]string, len(ps))
	for _, p := range ps {
		by[p.Queue] = p.By
	}
	for i := range qs {
		if b, ok := by[qs[i].Queue]; ok {
			qs[i].Paused, qs[i].PausedBy = true, b
		}
	}
	return nil
}
