package sqlbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// DefaultPeekDelay is the baseline's wait after a peek that found nothing,
// as in NServiceBus.SqlServer's message pump (QueuePeekerOptions, 1 s) and
// equal to Berth's default empty delay.
const DefaultPeekDelay = time.Second

// peekSubscriber is the baseline receive strategy of classic SQL transports
// (NServiceBus.SqlServer's message pump): peek how many messages are waiting
// with a count query, then launch that many single-row receives, each
// waiting for a concurrency slot, and peek again once they are launched.
//
// It runs on Berth's own engine (sqlqueue.Source: the same table, claim
// statement with n = 1, lease gate, group-committed settlements and
// wake-ups), so that the receive strategy is the only difference with the
// "berth" strategy.
type peekSubscriber struct {
	cfg         sqlqueue.SubscriberConfig
	concurrency int
	peekDelay   time.Duration

	peeks      atomic.Int64
	emptyPeeks atomic.Int64

	mu      sync.Mutex
	sources []*sqlqueue.Source
	closing chan struct{}
	closed  bool
	wg      sync.WaitGroup
}

var _ message.Subscriber = (*peekSubscriber)(nil)

func newPeekSubscriber(cfg sqlqueue.SubscriberConfig, concurrency int) *peekSubscriber {
	return &peekSubscriber{
		cfg:         cfg,
		concurrency: max(concurrency, 1),
		peekDelay:   DefaultPeekDelay,
		closing:     make(chan struct{}),
	}
}

// Subscribe implements message.Subscriber.
func (p *peekSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, transport.ErrClosed
	}
	src, err := sqlqueue.NewSource(ctx, postgres.Dialect{}, p.cfg, topic, nil)
	if err != nil {
		return nil, err
	}
	p.sources = append(p.sources, src)
	out := make(chan *message.Message)
	p.wg.Add(1)
	go p.pump(src, out)
	return out, nil
}

// stats returns the engine's counts of every source plus the peeks.
func (p *peekSubscriber) stats() (sqlqueue.Stats, int64, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var st sqlqueue.Stats
	for _, s := range p.sources {
		addStats(&st, s.Stats())
	}
	return st, p.peeks.Load(), p.emptyPeeks.Load()
}

// pump is the receive loop of one subscription.
func (p *peekSubscriber) pump(src *sqlqueue.Source, out chan *message.Message) {
	defer p.wg.Done()
	var workers sync.WaitGroup
	defer func() {
		workers.Wait()
		close(out)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	slots := make(chan struct{}, p.concurrency)
	peekSQL := `SELECT count(*) FROM (SELECT 1 FROM ` + src.Queue().Table + `
WHERE state = 0 AND due_at <= now() AND (expires_at IS NULL OR expires_at > now())
LIMIT $1) AS p`
	for ctx.Err() == nil {
		var n int
		p.peeks.Add(1)
		err := p.cfg.DB.QueryRowContext(ctx, peekSQL, p.concurrency).Scan(&n)
		if err != nil || n == 0 {
			if err == nil {
				p.emptyPeeks.Add(1)
			}
			select {
			case <-ctx.Done():
			case <-src.Wake():
			case <-time.After(p.peekDelay):
			}
			continue
		}
		for range n {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			workers.Add(1)
			go func() {
				defer workers.Done()
				defer func() { <-slots }()
				p.receiveOne(ctx, src, out)
			}()
		}
	}
}

// receiveOne claims one row and, when it got one, hands it to user code and
// settles it.
func (p *peekSubscriber) receiveOne(ctx context.Context, src *sqlqueue.Source, out chan *message.Message) {
	ds, err := src.Claim(ctx, 1)
	if err != nil || len(ds) == 0 {
		return
	}
	d := ds[0]
	// Settlements run to completion even while closing.
	sctx := context.WithoutCancel(ctx)
	msg, err := src.Map(d)
	if err != nil {
		_ = src.DeadLetter(sctx, d, nil, err.Error())
		return
	}
	if err := src.Begin(sctx, d); err != nil {
		return // lease lost: user code never sees it
	}
	msg.Metadata.Set(transport.MetadataAttempt, fmt.Sprint(d.Attempt))
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msg.SetContext(mctx)
	select {
	case out <- msg:
	case <-ctx.Done():
		_ = src.Retry(sctx, d, 0, "")
		return
	}
	select {
	case <-msg.Acked():
		_ = src.Complete(sctx, d)
	case <-msg.Nacked():
		_ = src.Retry(sctx, d, 0, "")
	case <-ctx.Done():
		// Left to the lease and the sweeper, as a crashed consumer would.
	}
}

// Close implements message.Subscriber: it stops every pump, waits for its
// workers, then closes the sources. Idempotent.
func (p *peekSubscriber) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.closing)
	p.mu.Unlock()
	p.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, s := range p.sources {
		errs = append(errs, s.Close(ctx))
	}
	return errors.Join(errs...)
}

// addStats adds b to a, field by field.
func addStats(a *sqlqueue.Stats, b sqlqueue.Stats) {
	a.Claims += b.Claims
	a.EmptyClaims += b.EmptyClaims
	a.ClaimedRows += b.ClaimedRows
	a.StartedRows += b.StartedRows
	a.Begins += b.Begins
	a.Completes += b.Completes
	a.RiddenAcks += b.RiddenAcks
	a.Renews += b.Renews
	a.Retries += b.Retries
	a.Releases += b.Releases
	a.DeadLetters += b.DeadLetters
	a.Inserts += b.Inserts
	a.Sweeps += b.Sweeps
	a.Tx += b.Tx
	a.Other += b.Other
	a.Analyzes += b.Analyzes
	a.LeaseLost += b.LeaseLost
	a.Recovered += b.Recovered
	a.DeadLettered += b.DeadLettered
	a.Expired += b.Expired
	a.Published += b.Published
	a.SkippedClaims += b.SkippedClaims
	a.KeyClaims += b.KeyClaims
	a.Probes += b.Probes
	a.ProbeHits += b.ProbeHits
	a.SkippedSweeps += b.SkippedSweeps
}
