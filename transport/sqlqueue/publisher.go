package sqlqueue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/delaymeta"
	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// Metadata keys the publisher reads (and does not store).
const (
	// MetadataDelay delays one message: a Go duration ("1500ms", "2m").
	MetadataDelay = "berth_delay"
	// MetadataDeliverAt delays one message until an RFC 3339 time.
	MetadataDeliverAt = "berth_deliver_at"
)

// Publisher is a Watermill message.Publisher over SQL queue tables. Each
// Publish call inserts all its messages, into the queue of every consumer
// group subscribed to the topic, with one multi-row INSERT per queue, in
// one transaction when there are several. A topic nobody subscribed to yet
// parks its messages in its default (no-group) queue, for the consumer
// groups registered later (see the package documentation, Consumer
// groups).
type Publisher struct {
	e      *engine
	cfg    PublisherConfig
	logger watermill.LoggerAdapter

	mu     sync.RWMutex
	closed bool
	once   sync.Once

	subsMu sync.Mutex
	subs   map[string]subsEntry // topic → its queues, cached

	// gate coalesces the inserts' notifications (nil: every insert
	// notifies, or the dialect has none).
	gate *notifyGate

	// declared holds the topics whose declared groups (Groups) are
	// registered; warned, the topics whose first parked message was
	// logged.
	declared, warned sync.Map
}

// subsEntry is the cached answer of the subscriptions lookup of a topic.
type subsEntry struct {
	queues []Queue
	parked bool // no subscription: queues is the default queue
	at     time.Time
	gen    uint64 // subscriptionsGen when read
}

// subscriptionsGen counts subscriptions recorded by this process (any
// engine). A publisher's cached lookup taken before the latest one is
// stale: a consumer group subscribed in-process is seen by the next
// Publish.
var subscriptionsGen atomic.Uint64

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher validates cfg and returns a publisher writing d's
// statements, on cfg.DB or, when it is nil, on d's shared pool of cfg.DSN
// (released on Close), logging to logger (watermill.NopLogger when nil).
// Dialect packages' NewPublisher call it with their Dialect. It does not
// touch the database until the first Publish.
func NewPublisher(d Dialect, cfg PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	if err := validateFor(d, cfg.problems(d, false)); err != nil {
		return nil, err
	}
	return withPool(d, cfg.DB, cfg.Closer, cfg.DSN, cfg.MaxOpenConns, func(db *sql.DB, closer io.Closer) (*Publisher, error) {
		cfg.DB, cfg.Closer, cfg.logger = db, closer, logger
		return newPublisher(d, cfg.withDefaults()), nil
	})
}

func newPublisher(d Dialect, cfg PublisherConfig) *Publisher {
	p := &Publisher{e: newEngine(cfg.DB, d, cfg.Tables), cfg: cfg, logger: cfg.logger, subs: map[string]subsEntry{}}
	if c, ok := d.(NotifyCoalescer); ok && cfg.NotifyWindow > 0 {
		p.gate = newNotifyGate(cfg.NotifyWindow, cfg.logger, func(ctx context.Context, q Queue) error {
			return query(ctx, p.e.db, &p.e.ctrs.other, c.Notify(q), nil)
		})
	}
	return p
}

// Stats returns the publisher's round-trip and row counts.
func (p *Publisher) Stats() Stats { return p.e.ctrs.Snapshot() }

// MessagingSystem returns the messaging.system of the publisher's dialect
// (see MessagingSystem), for package telemetry.
func (p *Publisher) MessagingSystem() string { return MessagingSystem(p.e.d) }

// Publish implements message.Publisher.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return transport.ErrClosed
	}
	ctx := context.Background()
	if len(msgs) > 0 && msgs[0].Context() != nil {
		ctx = context.WithoutCancel(msgs[0].Context())
	}
	if err := checkNames(p.e.d, topic, ""); err != nil {
		return fmt.Errorf("sqlqueue: publish to %.40q: %w", topic, err)
	}
	for _, m := range msgs {
		if err := checkUUID(p.e.d, m.UUID); err != nil {
			return fmt.Errorf("sqlqueue: publish to %q: %w", topic, err)
		}
		if err := checkOrderingKey(p.e.d, m.UUID, m.Metadata[transport.MetadataOrderingKey]); err != nil {
			return fmt.Errorf("sqlqueue: publish to %q: %w", topic, err)
		}
	}
	rows, err := p.rows(msgs)
	if err != nil || len(rows) == 0 {
		return err
	}
	if err := p.e.ensureShared(ctx); err != nil {
		return err
	}
	if len(p.cfg.Groups) > 0 {
		if err := p.declare(ctx, nil, topic); err != nil {
			return err
		}
	}
	queues, parked, err := p.targets(ctx, p.e.db, nil, topic)
	if err != nil {
		return err
	}
	if pd, ok := p.e.d.(ParkingDialect); ok && parked {
		return p.publishParked(ctx, pd, topic, rows)
	}
	stmts, tickets, quiet := p.inserts(queues, rows)
	// An insert runs again only after an error that guarantees it did not
	// commit (a deadlock victim, a lock timeout, a login refused while the
	// database fails over): after a connection lost mid-statement it may
	// have committed, and a second run would publish every message twice.
	// Several inserts run in one transaction, run again whole.
	insert := func() error {
		return p.e.retryOutlasting(ctx, p.logger, "publish", notCommitted, func() error {
			if len(stmts) == 1 {
				return query(ctx, p.e.hot, &p.e.ctrs.inserts, stmts[0], nil)
			}
			cache, _ := p.e.hot.(*stmtCache)
			var prepared *txStmts
			err := inTx(ctx, p.e.db, &p.e.ctrs.txs, func(tx *sql.Tx) error {
				var q querier = tx
				if cache != nil {
					prepared = cache.inTx(tx)
					q = prepared
				}
				_, err := runAll(ctx, q, &p.e.ctrs.inserts, stmts)
				return err
			})
			if prepared != nil {
				prepared.prepareMissed(ctx)
			}
			return err
		})
	}
	err = insert()
	if err != nil && missingTable(p.e.d, err) {
		// A queue table dropped since it was made: by an operator or a
		// restored database (made again, as a subscriber does), or with
		// its group retired (berth groups retire), which a cached list of
		// subscriptions does not know yet. So the subscriptions are read
		// again, only the tables still subscribed are made again, and
		// nothing is registered; the insert, which cannot have committed,
		// runs once more.
		for _, tk := range tickets {
			p.gate.end(tk, false)
		}
		tickets = nil
		p.forget(topic)
		fresh, parked, terr := p.targets(ctx, p.e.db, nil, topic)
		switch pd, ok := p.e.d.(ParkingDialect); {
		case terr != nil:
			err = errors.Join(err, terr)
		case ok && parked:
			return p.publishParked(ctx, pd, topic, rows)
		case p.reprovision(ctx, fresh):
			queues = fresh
			stmts, tickets, quiet = p.inserts(queues, rows)
			err = insert()
		}
	}
	for _, tk := range tickets {
		p.gate.end(tk, err == nil)
	}
	if err != nil {
		if missingTable(p.e.d, err) {
			err = fmt.Errorf("%w: %w", transport.ErrQueueNotFound, err)
		}
		return fmt.Errorf("sqlqueue: publish to %q: %w", topic, err)
	}
	p.e.ctrs.published.Add(int64(len(rows) * len(queues)))
	if _, remote := p.e.d.(Notifier); !remote {
		quiet = queues
	}
	// Subscribers on this pool are woken here and now: those of a dialect
	// without notifications, and those whose insert left its notification
	// to a trailing one.
	for _, q := range quiet {
		localWake.notify(wakeKey{p.e.db, q.Name})
	}
	dueSoon(p.e.db, soonest(rows))
	return nil
}

// soonest is the shortest delay of rows with one (0: none).
func soonest(rows []InsertRow) time.Duration {
	var d time.Duration
	for _, r := range rows {
		if r.Delay > 0 && (d == 0 || r.Delay < d) {
			d = r.Delay
		}
	}
	return d
}

// reprovision makes every queue of queues again (engine.reprovision) and
// reports whether it could; never with Tables.ManualSchema.
func (p *Publisher) reprovision(ctx context.Context, queues []Queue) bool {
	for _, q := range queues {
		if !p.e.reprovision(ctx, q, false) {
			return false
		}
		guard.Do(func() {
			p.logger.Info("publish found its queue table missing; created it again", watermill.LogFields{"queue": q.Name})
		})
	}
	return true
}

// inserts returns the statements that insert rows into queues, with the
// notification gate's tickets (one per queue, none without a gate) and the
// queues whose insert left its notification out.
func (p *Publisher) inserts(queues []Queue, rows []InsertRow) (stmts []Stmt, tickets []ticket, quiet []Queue) {
	for _, q := range queues {
		if p.gate == nil {
			stmts = append(stmts, p.e.d.Insert(q, rows)...)
			continue
		}
		notify, tk := p.gate.begin(q)
		tickets = append(tickets, tk)
		if !notify {
			quiet = append(quiet, q)
		}
		stmts = append(stmts, p.e.d.(NotifyCoalescer).InsertNotify(q, rows, notify)...)
	}
	return stmts, tickets, quiet
}

// targets returns the queues subscribed to topic or, when there are none
// (parked), its default queue (created if needed). The answer is cached
// for SubscriptionsTTL, and dropped as soon as anything in this process
// records a new subscription. It reads through q; with in, the caller's
// transaction, it creates the default queue there, and caches nothing.
func (p *Publisher) targets(ctx context.Context, q querier, in *sql.Tx, topic string) ([]Queue, bool, error) {
	gen := subscriptionsGen.Load()
	if p.cfg.SubscriptionsTTL > 0 {
		p.subsMu.Lock()
		c, ok := p.subs[topic]
		p.subsMu.Unlock()
		if ok && c.gen == gen && time.Since(c.at) < p.cfg.SubscriptionsTTL {
			return c.queues, c.parked, nil
		}
	}
	at := time.Now()
	qs, parked, err := p.lookup(ctx, q, in, topic)
	if err != nil {
		return nil, false, err
	}
	if in == nil { // what in shows may roll back
		p.cache(topic, subsEntry{queues: qs, parked: parked, at: at, gen: gen})
	}
	return qs, parked, nil
}

// forget drops topic's cached subscriptions.
func (p *Publisher) forget(topic string) {
	p.subsMu.Lock()
	delete(p.subs, topic)
	p.subsMu.Unlock()
}

// cache records c as topic's subscriptions, when the publisher caches them.
func (p *Publisher) cache(topic string, c subsEntry) {
	if p.cfg.SubscriptionsTTL <= 0 {
		return
	}
	p.subsMu.Lock()
	if len(p.subs) >= maxCachedTopics {
		clear(p.subs)
	}
	p.subs[topic] = c
	p.subsMu.Unlock()
}

// publishParked inserts rows published to topic, which had no
// subscription when the publisher looked, in one transaction holding the
// topic lock in shared mode: it reads the subscriptions again (a group
// registered meanwhile holds the lock exclusively until it commits, and
// is seen here) and inserts into the queues it finds, or parks the rows in
// the default queue when there are still none.
func (p *Publisher) publishParked(ctx context.Context, pd ParkingDialect, topic string, rows []InsertRow) error {
	var (
		queues []Queue
		parked bool
		quiet  []Queue // queues whose insert left its notification out
	)
	gen, at := subscriptionsGen.Load(), time.Now() // before the read, as targets does
	err := p.e.retryOutlasting(ctx, p.logger, "publish", notCommitted, func() error {
		var tickets []ticket // the notification gate's, one per queue
		quiet = nil
		err := inTx(ctx, p.e.db, &p.e.ctrs.txs, func(tx *sql.Tx) error {
			if _, err := lockAcquired(ctx, tx, &p.e.ctrs.other, pd.SharedLock(p.e.topicLockKey(topic))); err != nil {
				return fmt.Errorf("topic lock: %w", err)
			}
			qs, err := p.subscribed(ctx, tx, topic)
			if err != nil {
				return err
			}
			queues, parked = qs, len(qs) == 0
			if parked {
				queues = []Queue{p.e.queue(topic, "")}
			}
			var stmts []Stmt
			stmts, tickets, quiet = p.inserts(queues, rows)
			_, err = runAll(ctx, tx, &p.e.ctrs.inserts, stmts)
			return err
		})
		for _, tk := range tickets {
			p.gate.end(tk, err == nil)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlqueue: publish to %q: %w", topic, err)
	}
	p.e.ctrs.published.Add(int64(len(rows) * len(queues)))
	if parked {
		p.parkedCount(topic, len(rows))
	} else {
		p.cache(topic, subsEntry{queues: queues, at: at, gen: gen})
	}
	if _, remote := p.e.d.(Notifier); !remote {
		quiet = queues
	}
	for _, q := range quiet {
		localWake.notify(wakeKey{p.e.db, q.Name})
	}
	return nil
}

// parkedCount counts n messages parked in topic's default queue, and logs
// the topic's first.
func (p *Publisher) parkedCount(topic string, n int) {
	p.e.ctrs.parked.Add(int64(n))
	if _, seen := p.warned.LoadOrStore(topic, true); seen {
		return
	}
	guard.Do(func() {
		p.logger.Info(fmt.Sprintf("topic %q has no subscribers: messages are parked in its default queue until a consumer group registers; declare groups with groups=%s:<group> (PublisherConfig.Groups) or berth migrate --queue %s:<group>", topic, topic, topic),
			watermill.LogFields{"topic": topic})
	})
}

// declare registers the consumer groups declared for topic (Groups),
// once per topic: their queues and subscriptions are created, and the
// messages parked so far copied to them, as a subscriber's registration
// does. With in, the caller's transaction, it registers there, every time.
func (p *Publisher) declare(ctx context.Context, in *sql.Tx, topic string) error {
	if _, done := p.declared.Load(topic); done {
		return nil
	}
	groups := append(append([]string(nil), p.cfg.Groups[topic]...), p.cfg.Groups["*"]...)
	for _, g := range groups {
		if err := p.e.ensureQueueIn(ctx, in, p.e.queue(topic, g), true); err != nil {
			return fmt.Errorf("sqlqueue: publish to %q: register declared group %q: %w", topic, g, err)
		}
	}
	if in == nil {
		p.declared.Store(topic, true)
	}
	return nil
}

// maxCachedTopics bounds the subscriptions cache; when full it starts
// over.
const maxCachedTopics = 10000

// lookup returns the queues subscribed to topic or, when there are none
// (parked), its default queue, created if needed (in in, the caller's
// transaction, when not nil).
func (p *Publisher) lookup(ctx context.Context, q querier, in *sql.Tx, topic string) ([]Queue, bool, error) {
	qs, err := p.subscribed(ctx, q, topic)
	if err != nil || len(qs) > 0 {
		return qs, false, err
	}
	dq := p.e.queue(topic, "")
	if err := p.e.ensureQueueIn(ctx, in, dq, false); err != nil {
		return nil, false, err
	}
	return []Queue{dq}, true, nil
}

// subscribed reads the queues subscribed to topic.
func (p *Publisher) subscribed(ctx context.Context, q querier, topic string) ([]Queue, error) {
	var names []string
	err := query(ctx, q, &p.e.ctrs.other, p.e.d.Subscriptions(p.e.names, topic), func(r *sql.Rows) error {
		var n string
		if err := r.Scan(&n); err != nil {
			return err
		}
		names = append(names, n)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlqueue: read subscriptions of %q: %w", topic, err)
	}
	qs := make([]Queue, len(names))
	for i, n := range names {
		qs[i] = Queue{Topic: topic, Name: n, Table: qualify(p.e.d, p.e.tables.Schema, n), Errors: p.e.names.Errors}
	}
	return qs, nil
}

// delayKeys are the publisher's own delay keys; internal/delaymeta reads
// them and Watermill's (components/delay).
var delayKeys = delaymeta.Keys{Delay: MetadataDelay, DeliverAt: MetadataDeliverAt}

// rows encodes msgs, checking size and reading delays. A message with
// Watermill's two delay keys is stored with delaymeta.Marker, so that
// published again (by a requeuer) it is not delayed twice.
func (p *Publisher) rows(msgs []*message.Message) ([]InsertRow, error) {
	rows := make([]InsertRow, 0, len(msgs))
	now := time.Now()
	for _, m := range msgs {
		delay, set, err := delaymeta.Delay(m.Metadata, now, delayKeys)
		if err != nil {
			return nil, fmt.Errorf("sqlqueue: message %s: %w", m.UUID, err)
		}
		if !set {
			delay = p.cfg.Delay
		}
		md := make(map[string]string, len(m.Metadata)+1)
		for k, v := range m.Metadata {
			if k != MetadataDelay && k != MetadataDeliverAt {
				md[k] = v
			}
		}
		if mark := delaymeta.Mark(m.Metadata, now, delay, delayKeys); mark != "" {
			md[delaymeta.Marker] = mark
		}
		headers, err := json.Marshal(md)
		if err != nil {
			return nil, fmt.Errorf("sqlqueue: message %s: encode metadata: %w", m.UUID, err)
		}
		if size := len(headers) + len(m.Payload); size > p.cfg.MaxMessageSize {
			return nil, fmt.Errorf("%w: message %s is %d bytes (metadata + payload), the limit is %d (MaxMessageSize)",
				transport.ErrMessageTooLarge, m.UUID, size, p.cfg.MaxMessageSize)
		}
		body := m.Payload
		if body == nil {
			body = []byte{}
		}
		// The ordering key stays in the headers too, for the handler.
		rows = append(rows, InsertRow{UUID: m.UUID, Headers: headers, Body: body, Delay: delay, TTL: p.cfg.TTL,
			OrderingKey: m.Metadata[transport.MetadataOrderingKey]})
	}
	return rows, nil
}

// DB implements transport.DBPublisher: the pool the publisher writes
// with (its own, or the process-wide pool of its DSN). It belongs to the
// publisher: usable while the publisher is open, not to be closed.
func (p *Publisher) DB() *sql.DB { return p.e.db }

// WithTx returns a publisher that inserts inside tx, the caller's
// transaction (the outbox pattern): the messages become visible when, and
// only if, tx commits. Tables are created, when missing, on the
// publisher's own pool before the first insert; inside tx when that pool
// holds a single connection (SQLite's), which tx may be holding.
// PostgreSQL subscribers are
// woken at commit by NOTIFY; other databases' subscribers find the rows on
// their next poll.
func (p *Publisher) WithTx(tx *sql.Tx) message.Publisher { return &txPublisher{p: p, tx: tx} }

type txPublisher struct {
	p  *Publisher
	tx *sql.Tx
}

// inside returns the transaction that creates missing tables: tx when the
// publisher's pool cannot open a second connection while tx holds one
// (SQLite's pool holds one), nil (the pool) otherwise, which keeps DDL and
// its locks out of the caller's transaction.
func (t *txPublisher) inside() *sql.Tx {
	if t.p.e.db.Stats().MaxOpenConnections == 1 {
		return t.tx
	}
	return nil
}

func (t *txPublisher) Publish(topic string, msgs ...*message.Message) error {
	p := t.p
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return transport.ErrClosed
	}
	ctx := context.Background()
	for _, m := range msgs {
		if err := checkOrderingKey(p.e.d, m.UUID, m.Metadata[transport.MetadataOrderingKey]); err != nil {
			return fmt.Errorf("sqlqueue: publish to %q in transaction: %w", topic, err)
		}
	}
	rows, err := p.rows(msgs)
	if err != nil || len(rows) == 0 {
		return err
	}
	in := t.inside()
	if err := p.e.ensureQueueIn(ctx, in, p.e.queue(topic, ""), false); err != nil {
		return err
	}
	if len(p.cfg.Groups) > 0 {
		if err := p.declare(ctx, in, topic); err != nil {
			return err
		}
	}
	queues, parked, err := p.targets(ctx, t.tx, in, topic)
	if err != nil {
		return err
	}
	if pd, ok := p.e.d.(ParkingDialect); ok && parked {
		// No subscription: read them again under the topic lock, held
		// until tx ends, so that no group registers meanwhile without
		// the rows parked here.
		if _, err := lockAcquired(ctx, t.tx, &p.e.ctrs.other, pd.SharedLock(p.e.topicLockKey(topic))); err != nil {
			return fmt.Errorf("sqlqueue: publish to %q in transaction: topic lock: %w", topic, err)
		}
		qs, err := p.subscribed(ctx, t.tx, topic)
		if err != nil {
			return err
		}
		if len(qs) > 0 {
			queues, parked = qs, false
		}
	}
	var stmts []Stmt
	for _, q := range queues {
		stmts = append(stmts, insertInTx(p.e.d, q, rows)...)
	}
	if _, err := runAll(ctx, t.tx, &p.e.ctrs.inserts, stmts); err != nil {
		return fmt.Errorf("sqlqueue: publish to %q in transaction: %w", topic, err)
	}
	p.e.ctrs.published.Add(int64(len(rows) * len(queues)))
	if parked {
		p.parkedCount(topic, len(rows))
	}
	return nil
}

// Close makes the transaction-bound publisher unusable; it does not touch
// the transaction.
func (t *txPublisher) Close() error { return nil }

// MessagingSystem returns the publisher's messaging.system.
func (t *txPublisher) MessagingSystem() string { return t.p.MessagingSystem() }

// Close implements message.Publisher: it waits for Publish calls in
// progress, sends the trailing wake-up notifications still pending (see
// PublisherConfig.NotifyWindow), then closes Closer (if set). Idempotent.
func (p *Publisher) Close() error {
	var err error
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		if p.gate != nil {
			// No Publish is running: the trailing notifications still
			// pending go out now, before the pool closes.
			p.gate.close()
		}
		if p.cfg.Closer != nil {
			err = p.cfg.Closer.Close()
		}
	})
	return err
}

// ParkedMessages returns Stats().Parked: the messages parked so far (see
// the package documentation, Consumer groups), for telemetry.Parker.
func (p *Publisher) ParkedMessages() int64 { return p.e.ctrs.parked.Load() }
