package sqlbench

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// StrategyLimit is the "limit" contender of the drain scenario (issue 16):
// a minimal hand-written pgx loop doing the drain's work on Berth's own
// queue table, published by Berth's publisher, so that every drain reports
// how close Berth comes to what the database can do (MetricLimitRatio).
const StrategyLimit = "limit"

// MetricLimitRatio is the metric, on Berth's drain results, of its
// throughput divided by the limit loop's in the same run with the same
// instance count.
const MetricLimitRatio = "ratio_to_limit"

// Shape of the limit loop.
const (
	// LimitClaim is the rows one claim takes.
	LimitClaim = 64
	// LimitClaimsInFlight is the claims each instance keeps in flight, each
	// on a connection of its own.
	LimitClaimsInFlight = 2
	// limitDeleters are the connections deleting acknowledged rows.
	limitDeleters = 2
	// limitLease is the lease a claim sets (the loop never renews: it is
	// far longer than a drain).
	limitLease = 5 * time.Minute
	// limitMaxDelete bounds the rows of one DELETE.
	limitMaxDelete = 1024
	// limitEmptyDelay bounds the wait after a claim that found nothing
	// (it starts at 1 ms and doubles).
	limitEmptyDelay = 50 * time.Millisecond
)

// limitStrategy is the limit loop: Berth's table, set-up and publisher,
// its own receive.
func limitStrategy() strategy {
	return strategy{
		name:         StrategyLimit,
		isReceive:    isLimitClaim,
		initialize:   berthInitialize,
		newPublisher: berthPublisher,
		newInstance: func(db *sql.DB, concurrency int) (instance, error) {
			return instance{Subscriber: newLimitSubscriber(db, concurrency)}, nil
		},
	}
}

func isLimitClaim(sql string) bool { return strings.Contains(sql, "/* limit claim */") }

// limitSubscriber is one instance of the limit loop, as a Watermill
// subscriber so that the harness runs the same handler on it as on every
// contender. Per subscription it keeps LimitClaimsInFlight claims of up to
// LimitClaim rows in flight (UPDATE … WHERE id = ANY(ARRAY(SELECT … FOR
// UPDATE SKIP LOCKED)), straight into the processing state with the
// attempt counted: no separate lease gate), each taking as many of the
// instance's worker permits as rows it asks for, and deletes acknowledged
// rows in batches (whatever acknowledgements queued while the previous
// DELETE ran) on limitDeleters connections. A nacked row returns to
// pending; rows claimed but not handed out when closing are released.
type limitSubscriber struct {
	db      *sql.DB
	workers int
	owner   int64

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	subs    sync.WaitGroup
	errs    []error // statements that failed
}

func (l *limitSubscriber) fail(err error) {
	if err != nil {
		l.mu.Lock()
		l.errs = append(l.errs, err)
		l.mu.Unlock()
	}
}

var _ message.Subscriber = (*limitSubscriber)(nil)

func newLimitSubscriber(db *sql.DB, workers int) *limitSubscriber {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return &limitSubscriber{
		db:      db,
		workers: max(workers, 1),
		owner:   int64(binary.LittleEndian.Uint64(b[:]) >> 1),
		closing: make(chan struct{}),
	}
}

// Subscribe implements message.Subscriber.
func (l *limitSubscriber) Subscribe(_ context.Context, topic string) (<-chan *message.Message, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, transport.ErrClosed
	}
	table := postgres.Dialect{}.QuoteIdent(sqlqueue.QueueTableName(sqlqueue.DefaultTablePrefix, topic, ""))
	out := make(chan *message.Message)
	l.subs.Add(1)
	go func() {
		defer l.subs.Done()
		l.run(table, out)
	}()
	return out, nil
}

// Close implements message.Subscriber: it stops claiming, releases rows
// claimed but not handed out, waits (up to a minute) for the messages
// handed out to be acknowledged, deletes them, and returns. Idempotent.
func (l *limitSubscriber) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.closing)
	}
	l.mu.Unlock()
	l.subs.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.errs...)
}

// settlement is an acknowledgement (ack) or a negative one of row id.
type settlement struct {
	id  int64
	ack bool
}

// run is one subscription: claimers, deleters, and the messages between.
func (l *limitSubscriber) run(table string, out chan *message.Message) {
	claimSQL := `/* limit claim */ UPDATE ` + table + ` AS q
SET state = 2, owner = $1, attempts = q.attempts + 1, lease_until = now() + $2 * interval '1 millisecond'
WHERE q.id = ANY(ARRAY(
	SELECT id FROM ` + table + `
	WHERE state = 0 AND due_at <= now()
	ORDER BY due_at, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
))
RETURNING q.id, q.uuid, q.headers, q.body`
	deleteSQL := `DELETE FROM ` + table + ` WHERE id = ANY($1)`
	retrySQL := `UPDATE ` + table + ` SET state = 0, owner = NULL, lease_until = NULL WHERE id = ANY($1)`

	permits := make(chan struct{}, l.workers)
	for range l.workers {
		permits <- struct{}{}
	}
	settled := make(chan settlement, l.workers)
	var (
		claimers, handed, deleters sync.WaitGroup
		abandon                    = make(chan struct{})
	)
	for range limitDeleters {
		deleters.Add(1)
		go func() {
			defer deleters.Done()
			l.fail(l.withConn(func(pc *pgx.Conn) error {
				var acks, nacks []int64
				for s := range settled {
					acks, nacks = acks[:0], nacks[:0]
					add := func(s settlement) {
						if s.ack {
							acks = append(acks, s.id)
						} else {
							nacks = append(nacks, s.id)
						}
					}
					add(s)
				more:
					for len(acks)+len(nacks) < limitMaxDelete {
						select {
						case s, ok := <-settled:
							if !ok {
								break more
							}
							add(s)
						default:
							break more
						}
					}
					ctx := context.Background()
					if len(acks) > 0 {
						_, err := pc.Exec(ctx, deleteSQL, acks)
						l.fail(err)
					}
					if len(nacks) > 0 {
						_, err := pc.Exec(ctx, retrySQL, nacks)
						l.fail(err)
					}
				}
				return nil
			}))
		}()
	}
	for range LimitClaimsInFlight {
		claimers.Add(1)
		go func() {
			defer claimers.Done()
			l.fail(l.withConn(func(pc *pgx.Conn) error {
				return l.claimLoop(pc, claimSQL, retrySQL, permits, out, settled, &handed, abandon)
			}))
		}()
	}
	claimers.Wait()
	close(out)
	waited := make(chan struct{})
	go func() { handed.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(time.Minute):
		close(abandon) // left to the lease, as a crashed consumer would
		<-waited
	}
	close(settled)
	deleters.Wait()
}

// claimLoop claims until closing: take permits (at least one, at most
// LimitClaim), claim that many rows, hand each out with a watcher that
// settles it and returns its permit.
func (l *limitSubscriber) claimLoop(pc *pgx.Conn, claimSQL, retrySQL string, permits chan struct{}, out chan<- *message.Message,
	settled chan<- settlement, handed *sync.WaitGroup, abandon <-chan struct{}) error {
	ctx := context.Background()
	emptyDelay := time.Millisecond
	for {
		select {
		case <-permits:
		case <-l.closing:
			return nil
		}
		n := 1
	take:
		for n < LimitClaim {
			select {
			case <-permits:
				n++
			default:
				break take
			}
		}
		rows, err := pc.Query(ctx, claimSQL, l.owner, limitLease.Milliseconds(), n)
		if err != nil {
			return err
		}
		msgs := make([]*message.Message, 0, n)
		ids := make([]int64, 0, n)
		for rows.Next() {
			var (
				id            int64
				uuid, headers string
				body          []byte
			)
			if err := rows.Scan(&id, &uuid, &headers, &body); err != nil {
				rows.Close()
				return err
			}
			m := message.NewMessage(uuid, body)
			if err := json.Unmarshal([]byte(headers), &m.Metadata); err != nil {
				rows.Close()
				return fmt.Errorf("row %d: headers: %w", id, err)
			}
			msgs = append(msgs, m)
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for range n - len(msgs) {
			permits <- struct{}{}
		}
		if len(msgs) == 0 {
			select {
			case <-time.After(emptyDelay): // polling an empty queue
			case <-l.closing:
				return nil
			}
			emptyDelay = min(2*emptyDelay, limitEmptyDelay)
			continue
		}
		emptyDelay = time.Millisecond
		for i, m := range msgs {
			select {
			case out <- m:
			case <-l.closing:
				// Release what was not handed out.
				for range len(msgs) - i {
					permits <- struct{}{}
				}
				_, err := pc.Exec(ctx, retrySQL, ids[i:])
				return err
			}
			handed.Add(1)
			go func(id int64) {
				defer handed.Done()
				var s settlement
				select {
				case <-m.Acked():
					s = settlement{id: id, ack: true}
				case <-m.Nacked():
					s = settlement{id: id}
				case <-abandon:
					return
				}
				permits <- struct{}{}
				select {
				case settled <- s:
				case <-abandon:
				}
			}(ids[i])
		}
	}
}

// withConn runs fn on a pgx connection of the pool, held for as long as fn
// runs.
func (l *limitSubscriber) withConn(fn func(*pgx.Conn) error) error {
	c, err := l.db.Conn(context.Background())
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(func(dc any) error {
		sc, ok := dc.(interface{ Conn() *pgx.Conn }) // pgx's, or postgres.Connector's around it
		if !ok {
			return fmt.Errorf("sqlbench: limit needs the pgx stdlib driver, got %T", dc)
		}
		return fn(sc.Conn())
	})
}

// withLimitRatio adds MetricLimitRatio to every Berth drain result of rs
// that has a limit result of the same instance count and database.
func withLimitRatio(rs []bench.Result) []bench.Result {
	for _, r := range rs {
		if r.Strategy != StrategyBerth || r.Scenario != ScenarioDrain {
			continue
		}
		for _, l := range rs {
			if l.Strategy == StrategyLimit && l.Scenario == r.Scenario && l.Instances == r.Instances && l.Database == r.Database &&
				l.Metrics["msg_per_s"] > 0 && r.Metrics != nil {
				r.Metrics[MetricLimitRatio] = r.Metrics["msg_per_s"] / l.Metrics["msg_per_s"]
			}
		}
	}
	return rs
}

// DrainStrategies are the strategies of the drain scenario on PostgreSQL:
// Strategies, then the limit loop.
var DrainStrategies = append(append([]string(nil), Strategies...), StrategyLimit)
