package sqlqueue

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/coalesce"
	"github.com/berth-go/berth/internal/due"
	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// Source is the transport.Source of one queue table. It also implements
// transport.Renewer and transport.Waker. Subscriber opens one per Subscribe
// call; NewSource opens one directly (for tools and tests).
type Source struct {
	e      *engine
	cfg    SubscriberConfig
	q      Queue
	logger watermill.LoggerAdapter

	w      *waiter
	unhook func()
	// short: the last claim returned fewer rows than asked, so (unless a
	// wake-up arrives meanwhile) the next one would come back empty. Only
	// sources of a Subscriber skip that claim (skipShort): they have a
	// wake-up path (a LISTEN connection, or the in-process hub). Every
	// source's acks may wait for a claim after it (holdable).
	short     atomic.Bool
	skipShort bool
	// shortAt is when a full claim last came back short or empty (Unix
	// ns): within the empty delay after it, freed keys are handed off
	// instead of claimed by a full claim (handoff.go).
	shortAt atomic.Int64
	// idle is the pool's prober (nil: this source never parks); parked:
	// the last claim came back empty, so claims are answered empty without
	// a round trip until a wake-up arrives (see idle.go).
	idle   *prober
	parked atomic.Bool
	// retryDues are the due times of this source's retries with a delay:
	// a claim at or after one runs as if woken (a parked or short source
	// would otherwise answer it empty until the pool's next probe), since
	// its receive loop claims when a retry it issued falls due.
	retryDues due.Set

	begin    *coalesce.Coalescer[*transport.Delivery]
	complete *coalesce.Coalescer[*transport.Delivery]
	retry    *coalesce.Coalescer[retryItem]
	// rider holds acks for the next claim statement (ride.go); nil when
	// the dialect is no AckRider or AckHold is negative.
	rider *rider
	// kc is the dialect as a KeyClaimer (nil when it is none); freed are
	// the keys whose next rows the next claim looks for, kick the
	// listener's channel for it (handoff.go).
	kc    KeyClaimer
	freed freedKeys
	kick  chan struct{}
	// fetched counts the rows this source claimed fetched (not started)
	// that have not yet passed Begin or been released: rows waiting in the
	// buffer for a permit, which an ack waiting for a claim would hold.
	fetched atomic.Int64
	// hints turns notifications into the rows they announce.
	hints hintEstimate

	// statsAt is when the planner-statistics check last started, Unix ns,
	// and statsN the size of the claim that started it (analyze.go);
	// statsBusy: one is running.
	statsAt, statsN atomic.Int64
	statsBusy       atomic.Bool

	// lastOK is when the database last answered a claim or a ping, Unix
	// ns (LastContact).
	lastOK atomic.Int64

	stopSweep chan struct{}
	swept     sync.WaitGroup // the sweeper and the statistics check
	bgMu      sync.Mutex
	bgClosed  bool // no new background work: Close has begun
	closeOnce sync.Once
}

var (
	_ transport.Source          = (*Source)(nil)
	_ transport.Renewer         = (*Source)(nil)
	_ transport.Waker           = (*Source)(nil)
	_ transport.DirectClaimer   = (*Source)(nil)
	_ transport.TxSettler       = (*Source)(nil)
	_ transport.Pinger          = (*Source)(nil)
	_ transport.ContactReporter = (*Source)(nil)
)

// Ping implements transport.Pinger: a round trip on a pooled connection
// (database/sql's PingContext, which replaces a broken one).
func (s *Source) Ping(ctx context.Context) error {
	sctx, cancel := s.stmtCtx(ctx)
	defer cancel()
	if err := s.e.db.PingContext(sctx); err != nil {
		return err
	}
	s.contacted()
	return nil
}

// contacted records that the database answered this source (and, parked
// sources of one pool sharing their prober, every source of the pool).
func (s *Source) contacted() {
	now := time.Now().UnixNano()
	s.lastOK.Store(now)
	if s.idle != nil {
		s.idle.lastOK.Store(now)
	}
}

// LastContact implements transport.ContactReporter: when the database
// last answered a claim or a ping of this source, or an idle probe or a
// ping of another source of its pool. A parked source answers claims
// without a round trip, so its listener's successful claims say nothing of
// the database.
func (s *Source) LastContact() time.Time {
	ns := s.lastOK.Load()
	if s.idle != nil {
		ns = max(ns, s.idle.lastOK.Load())
	}
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// handle is a delivery's settlement token. key: the row's ordering key
// ("" when none), so settling it may unblock the next row of its key (see
// unblocked). started: the claim put the row straight into processing.
type handle struct {
	ref     Ref
	key     string
	started bool
}

// rawRow is a claimed row's buffers, referenced only by Delivery.Raw until
// mapped.
type rawRow struct {
	uuid    string
	headers []byte
	body    []byte
}

// A claimedRow is a claimed row's delivery and its handle (Delivery.Handle
// points to h) in one allocation; its buffers (Delivery.Raw) are one of
// their own, dropped once mapped. Made separately, with the scan's
// destinations made per row too, they were nine allocations per row and
// a tenth of a PostgreSQL drain's allocations.
type claimedRow struct {
	d transport.Delivery
	h handle
}

type retryItem struct {
	d     *transport.Delivery
	delay time.Duration
	line  string // transport.AttemptLine
}

func newSource(e *engine, cfg SubscriberConfig, q Queue, skipShort bool) *Source {
	s := &Source{
		skipShort: skipShort,
		e:         e,
		cfg:       cfg,
		q:         q,
		logger:    withFields(cfg.logger, watermill.LogFields{"queue": q.Name}),
		w:         &waiter{ch: make(chan struct{}, 1), debounce: cfg.WakeDebounce},
		kick:      make(chan struct{}, 1),
		stopSweep: make(chan struct{}),
	}
	s.kc, _ = e.d.(KeyClaimer)
	s.begin = coalesce.NewLinger(s.flushBegin, cfg.SettleBatch, cfg.SettleLinger)
	s.complete = coalesce.NewLinger(s.flushComplete, cfg.SettleBatch, cfg.SettleLinger)
	s.retry = coalesce.New(s.flushRetry, cfg.SettleBatch)
	if _, ok := e.d.(AckRider); ok && cfg.AckHold > 0 {
		s.rider = &rider{s: s, hold: cfg.AckHold}
	}
	mp, parks := e.d.(MultiProber)
	parks = parks && skipShort && cfg.IdleProbeMax > 0
	if parks {
		s.w.parked = &s.parked // before the hub sees the waiter
	}
	s.unhook = localWake.add(wakeKey{e.db, q.Name}, s.w)
	if parks {
		s.idle = acquireProber(s, mp)
	}
	if cfg.SweepInterval > 0 {
		s.swept.Add(1)
		go s.sweepLoop()
	}
	return s
}

// withFields returns logger.With(fields), or logger itself when With
// panics: a faulty logger costs its fields, not the Subscribe call.
func withFields(logger watermill.LoggerAdapter, fields watermill.LogFields) watermill.LoggerAdapter {
	out := logger
	guard.Do(func() { out = logger.With(fields) })
	return out
}

// Queue returns the queue this source consumes.
func (s *Source) Queue() Queue { return s.q }

func (s *Source) stmtCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StatementTimeout)
}

// newOwner returns a fresh random claim token.
func newOwner() int64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return int64(binary.LittleEndian.Uint64(b[:]) &^ (1 << 63))
}

// Claim implements transport.Source: one set-based statement claims up to
// max due rows for a fresh owner token. The statement is not interrupted by
// ctx (a claim whose result were lost would strand its rows until the fetch
// timeout); it is bounded by StatementTimeout.
func (s *Source) Claim(ctx context.Context, max int) ([]*transport.Delivery, error) {
	return s.ClaimDirect(ctx, max, 0)
}

// ClaimDirect implements transport.DirectClaimer: the same statement claims
// the first direct rows straight into processing (attempt counted, the
// processing lease set), when the dialect can (DirectDialect); otherwise
// it is Claim.
func (s *Source) ClaimDirect(ctx context.Context, max, direct int) ([]*transport.Delivery, error) {
	s.w.idle.Store(false)
	s.w.claimed.Store(time.Now().UnixNano())
	woken := s.w.woke.Swap(false)
	select { // anything notified before this claim is covered by it
	case <-s.w.ch:
		woken = true
	default:
	}
	if s.retryDues.Len() > 0 { // one atomic load while no retry is pending
		if at, ok := s.retryDues.Next(); ok && !time.Now().Before(at) {
			s.retryDues.DropUntil(time.Now())
			woken = true // a retry of ours fell due: the row may be there
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Rows handed off by key (handoff.go) before this claim's own.
	var handed []*transport.Delivery
	if s.kc != nil {
		if keys, from, again := s.freed.take(); len(keys) > 0 {
			if !woken && (s.parked.Load() || s.skipShort && time.Since(time.Unix(0, s.shortAt.Load())) < s.cfg.Pipeline.EmptyDelay) {
				// A full claim within the empty delay came back short and
				// nothing woke this source since: the rest of the backlog
				// is blocked or absent (the claim below would be skipped,
				// or answered as the poll the empty delay makes). Look for
				// the freed keys' next rows only.
				return s.claimKeys(ctx, keys, from, again, max, direct)
			}
			// Otherwise look for them first, then claim as usual: the full
			// claim does not see a waiting head.
			ds, started, err := s.claimKeyRows(ctx, keys, from, again, max, direct)
			if err != nil {
				return nil, err
			}
			s.claimed(ds, started, direct)
			if len(ds) >= max {
				return ds, nil
			}
			handed = ds
			max -= len(ds)
			if direct -= started; direct < 0 {
				direct = 0
			}
		}
	}
	if s.idle != nil {
		if woken {
			s.idle.wake() // activity: the pool's probe interval starts over
		} else if s.parked.Load() {
			// Idle: the pool's prober, an in-process publisher or a NOTIFY
			// wakes this source when rows arrive.
			s.e.ctrs.skippedClaims.Add(1)
			s.w.idle.Store(len(handed) == 0)
			return handed, nil
		}
		s.parked.Store(false)
	}
	if s.short.Swap(false) && s.skipShort && !woken {
		// The previous claim found fewer due rows than it asked for, and
		// nothing was inserted, released or recovered here since (that would
		// have sent a wake-up): the database would answer empty. Rows that
		// arrive without a wake-up (delayed rows falling due, another
		// process's releases) are found by the next poll, as they would be
		// had this claim run a moment earlier.
		s.e.ctrs.skippedClaims.Add(1)
		s.w.idle.Store(len(handed) == 0)
		return handed, nil
	}
	owner := newOwner()
	// A claim runs again after a transient error: one rolled back (a
	// deadlock victim) claimed nothing; one whose reply was lost may have
	// claimed rows, which no delivery here refers to: the sweeper returns
	// them to pending after the fetch timeout, attempts unchanged.
	dd, _ := s.e.d.(DirectDialect)
	direct = min(direct, max)
	if dd == nil {
		direct = 0
	}
	var riders []*ridingAck // acks this claim carries
	if s.rider != nil {
		riders = s.rider.take(s.cfg.SettleBatch)
	}
	var st Stmt
	switch {
	case len(riders) > 0:
		st = s.e.d.(AckRider).ClaimComplete(s.q, owner, max, direct, s.cfg.FetchTimeout, s.cfg.Lease, ridersRefs(riders))
	case direct > 0:
		st = dd.ClaimDirect(s.q, owner, max, direct, s.cfg.FetchTimeout, s.cfg.Lease)
	default:
		st = s.e.d.Claim(s.q, owner, max, s.cfg.FetchTimeout)
	}
	ds, started, acked, err := s.runClaim(ctx, st, owner, direct, direct > 0 || len(riders) > 0)
	if len(riders) > 0 {
		s.settleRiders(riders, acked, err, false)
	}
	if err != nil {
		if len(handed) > 0 {
			// Delivered all the same; the loop sees the error at its next
			// claim.
			guard.Do(func() { s.logger.Error("claim after a hand-off failed", err, nil) })
			return handed, nil
		}
		return nil, s.claimErr(ctx, err)
	}
	s.contacted()
	switch {
	case len(ds) == 0:
		s.shortAt.Store(time.Now().UnixNano())
		s.e.ctrs.emptyClaims.Add(1)
		s.w.idle.Store(true) // the loop now waits: a wake-up candidate
		if s.idle != nil {
			s.parked.Store(true)
			s.idle.parked()
		}
	case len(ds) < max:
		s.short.Store(true)
		s.shortAt.Store(time.Now().UnixNano())
	default:
		s.checkStats(max)
	}
	if len(ds) > 0 && s.idle != nil {
		s.idle.wake()
	}
	s.claimed(ds, started, direct)
	if len(handed) > 0 {
		ds = append(handed, ds...)
		slices.SortFunc(ds, compareID)
	}
	return ds, nil
}

// runClaim runs a claim statement (Claim, or with state: ClaimDirect,
// ClaimComplete, ClaimKeys) for owner, again after a transient error, and
// returns the rows claimed, how many of them started, and the ids of the
// acks it deleted. The statement is not interrupted by the caller's
// context (a claim whose result were lost would strand its rows until the
// fetch timeout); it is bounded by ClaimTimeout.
func (s *Source) runClaim(ctx context.Context, st Stmt, owner int64, direct int, withState bool) (ds []*transport.Delivery, started int, acked map[int64]bool, err error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ClaimTimeout)
	defer cancel()
	acked = map[int64]bool{}
	// The scan's destinations, made once per claim (the driver copies each
	// row's bytes out of its buffers).
	var (
		id              int64
		uuid            string
		headers, body   []byte
		attempts, state int
	)
	dest := []any{&id, &uuid, &headers, &body, &attempts}
	if withState {
		dest = append(dest, &state)
	}
	err = s.e.retry(sctx, s.logger, "claim", idempotent, func() error {
		ds, started = nil, 0
		clear(acked)
		return query(sctx, s.e.hot, &s.e.ctrs.claims, st, func(r *sql.Rows) error {
			state = 0
			if err := r.Scan(dest...); err != nil {
				return err
			}
			if state == StateAcked {
				acked[id] = true
				return nil
			}
			// A row only the fence could have put in processing: one this
			// claim asked for (a dialect's statement gets no more).
			begun := state == StateProcessing && started < direct
			if begun {
				started++
			}
			row := &claimedRow{h: handle{ref: Ref{ID: id, Owner: owner}, key: orderingKeyOf(headers), started: begun}}
			row.d = transport.Delivery{
				ID:      strconv.FormatInt(id, 10),
				Attempt: attempts,
				Handle:  &row.h,
				Raw:     &rawRow{uuid: uuid, headers: headers, body: body},
				Started: begun,
			}
			ds = append(ds, &row.d)
			return nil
		})
	})
	return ds, started, acked, err
}

// claimErr wraps a claim's error; a missing queue table is re-created
// (reported once: health shows the queue went missing; the next claim
// finds the re-created table). Rows claimed before a failure are left to
// the sweeper.
func (s *Source) claimErr(ctx context.Context, err error) error {
	err = s.e.wrapQueueErr(s.q, fmt.Errorf("sqlqueue: claim from %s: %w", s.q.Name, err))
	if errors.Is(err, transport.ErrQueueNotFound) && s.e.reprovision(ctx, s.q, true) {
		err = fmt.Errorf("%w; re-created it", err)
	}
	return err
}

// claimed counts a successful claim's rows and orders them by id.
func (s *Source) claimed(ds []*transport.Delivery, started, direct int) {
	s.e.ctrs.claimedRows.Add(int64(len(ds)))
	s.e.ctrs.startedRows.Add(int64(started))
	if direct > 0 {
		// The loop reserves a permit only beyond every buffered row, so
		// few if any fetched rows of earlier claims still wait; the count
		// starts over (one left over by a path that settled a row without
		// Begin or Release, a dead-letter of an unmappable row, would
		// otherwise keep acks from riding for good). Reading low for a
		// moment only lets an ack wait for a claim (AckHold) while such
		// rows pass Begin.
		s.fetched.Store(0)
	}
	s.fetched.Add(int64(len(ds) - started))
	s.hints.claimed(len(ds))
	slices.SortFunc(ds, func(a, b *transport.Delivery) int {
		return compareID(a, b)
	})
}

func compareID(a, b *transport.Delivery) int {
	x, y := refOf(a).ID, refOf(b).ID
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func refOf(d *transport.Delivery) Ref { return handleOf(d).ref }

// handleOf returns d's handle; the zero handle for a delivery of another
// source.
func handleOf(d *transport.Delivery) handle {
	if h, ok := d.Handle.(*handle); ok {
		return *h
	}
	return handle{}
}

// Map implements transport.Source: the headers column is a JSON object of
// metadata; a row whose headers cannot be decoded is an error (the
// pipeline dead-letters it).
func (s *Source) Map(d *transport.Delivery) (*message.Message, error) {
	raw, ok := d.Raw.(*rawRow)
	if !ok {
		return nil, fmt.Errorf("sqlqueue: delivery %s has no raw row", d.ID)
	}
	md := message.Metadata{}
	if len(raw.headers) > 0 {
		var err error
		if md, err = decodeHeaders(raw.headers); err != nil {
			return nil, fmt.Errorf("sqlqueue: decode headers of row %s: %w", d.ID, err)
		}
	}
	msg := message.NewMessage(raw.uuid, raw.body)
	msg.Metadata = md
	return msg, nil
}

// Begin implements transport.Source: the lease gate, group-committed with
// concurrent Begin calls into one fenced statement.
func (s *Source) Begin(ctx context.Context, d *transport.Delivery) error {
	s.fetched.Add(-1) // out of the buffer, whatever the outcome
	return s.settleErr("begin", d, s.begin.Do(ctx, d))
}

// settleErr maps the coalescers' ErrClosed (a settlement after Close) to
// transport.ErrClosed; other errors pass unchanged.
func (s *Source) settleErr(op string, d *transport.Delivery, err error) error {
	if errors.Is(err, coalesce.ErrClosed) {
		return fmt.Errorf("sqlqueue: %s row %s of %s: %w", op, d.ID, s.q.Name, transport.ErrClosed)
	}
	return err
}

func (s *Source) flushBegin(ctx context.Context, ds []*transport.Delivery) []error {
	sctx, cancel := s.stmtCtx(ctx)
	defer cancel()
	refs := refsOf(ds)
	got := map[int64]int{}
	st := s.e.d.Begin(s.q, refs, s.cfg.Lease)
	err := s.e.retryOutlasting(sctx, s.logger, "begin", idempotent, func() error {
		clear(got)
		return query(sctx, s.e.hot, &s.e.ctrs.begins, st, func(r *sql.Rows) error {
			var id int64
			var attempts int
			if err := r.Scan(&id, &attempts); err != nil {
				return err
			}
			got[id] = attempts
			return nil
		})
	})
	if err != nil {
		return []error{fmt.Errorf("sqlqueue: begin: %w", err)}
	}
	errs := make([]error, len(ds))
	for i, d := range ds {
		if a, ok := got[refs[i].ID]; ok {
			d.Attempt = a
		} else {
			errs[i] = s.lost(d)
		}
	}
	return errs
}

func (s *Source) lost(d *transport.Delivery) error {
	s.e.ctrs.leaseLost.Add(1)
	return fmt.Errorf("sqlqueue: row %s of %s: %w", d.ID, s.q.Name, transport.ErrLeaseLost)
}

func refsOf(ds []*transport.Delivery) []Ref {
	refs := make([]Ref, len(ds))
	for i, d := range ds {
		refs[i] = refOf(d)
	}
	return refs
}

// fenced runs a statement returning touched ids and maps each delivery to
// nil or ErrLeaseLost. A transient error runs it again: fenced on owner and
// state, a second run touches nothing the first one committed (those rows
// then read as lost), so no row is settled twice.
func (s *Source) fenced(ctx context.Context, ds []*transport.Delivery, st Stmt, rt *countRef) []error {
	sctx, cancel := s.stmtCtx(ctx)
	defer cancel()
	var ids []int64
	err := s.e.retryOutlasting(sctx, s.logger, rt.kind, idempotent, func() error {
		var err error
		ids, err = queryIDs(sctx, s.e.hot, rt.n, st)
		return err
	})
	if err != nil {
		return []error{fmt.Errorf("sqlqueue: %s: %w", rt.kind, err)}
	}
	touched := make(map[int64]bool, len(ids))
	for _, id := range ids {
		touched[id] = true
	}
	errs := make([]error, len(ds))
	for i, d := range ds {
		if !touched[refOf(d).ID] {
			errs[i] = s.lost(d)
		}
	}
	return errs
}

// Complete implements transport.Source: the ack deletes the row,
// group-committed into one fenced DELETE, or carried by the next claim
// statement when the flow is light (ride.go).
func (s *Source) Complete(ctx context.Context, d *transport.Delivery) error {
	if s.holdable() {
		if err, ok := s.rider.ride(ctx, d); ok {
			return err
		}
	}
	return s.settleErr("complete", d, s.complete.Do(ctx, d))
}

// CompleteAsync implements transport.AsyncCompleter: Complete's group
// commit, with done called by the goroutine that runs the batch's DELETE.
// An ack that rides the next claim (light flow) waits for it on the
// caller's goroutine, as Complete does.
func (s *Source) CompleteAsync(ctx context.Context, d *transport.Delivery, done func(error)) {
	if s.holdable() {
		if err, ok := s.rider.ride(ctx, d); ok {
			done(err)
			return
		}
	}
	s.complete.DoAsync(ctx, d, func(err error) { done(s.settleErr("complete", d, err)) })
}

// BeginTx implements transport.TxSettler: a transaction on the queue
// table's database, for a handler to write in (transport.TxFromContext).
func (s *Source) BeginTx(ctx context.Context, d *transport.Delivery) (*sql.Tx, error) {
	s.e.ctrs.txs.Add(1)
	tx, err := s.e.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlqueue: begin the handler transaction of row %s of %s: %w", d.ID, s.q.Name, err)
	}
	return tx, nil
}

// CompleteTx implements transport.TxSettler: Complete's fenced DELETE,
// inside the handler's transaction, then its COMMIT (with a
// SettleCommitter dialect, a DELETE that fails when the lease is lost, so
// that the driver may send the COMMIT with it). The DELETE locks the
// row until the commit, so a consumer that takes the row over after it
// (the sweeper, a claim) waits for the outcome or skips the row; one that
// took it over before it leaves it untouched (lease lost).
func (s *Source) CompleteTx(ctx context.Context, d *transport.Delivery, tx *sql.Tx) error {
	defer s.unblocked(d)
	sctx, cancel := s.stmtCtx(ctx)
	defer cancel()
	var err error
	if sc, ok := s.e.d.(SettleCommitter); ok {
		st := sc.CompleteCommit(s.q, refOf(d))
		s.e.ctrs.completes.Add(1)
		if _, err = tx.ExecContext(sctx, st.SQL, st.Args...); sc.LeaseLost(err) {
			err = s.lost(d)
		}
	} else {
		var ids []int64
		ids, err = queryIDs(sctx, tx, &s.e.ctrs.completes, completeInTx(s.e.d, s.q, []Ref{refOf(d)}))
		if err == nil && len(ids) == 0 {
			err = s.lost(d)
		}
	}
	if err != nil {
		_ = tx.Rollback()
		if !errors.Is(err, transport.ErrLeaseLost) {
			err = fmt.Errorf("sqlqueue: complete row %s of %s in the handler transaction: %w", d.ID, s.q.Name, err)
		}
		return err
	}
	s.e.ctrs.txs.Add(1)
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlqueue: commit the handler transaction of row %s of %s: %w", d.ID, s.q.Name, err)
	}
	return nil
}

// settleRiders hands the acks a claim statement carried their outcomes:
// nil for the rows it deleted, ErrLeaseLost for the others, or the
// statement's error.
func (s *Source) settleRiders(riders []*ridingAck, acked map[int64]bool, err error, handedOff bool) {
	ds := make([]*transport.Delivery, len(riders))
	errs := make([]error, len(riders))
	for i, a := range riders {
		ds[i] = a.d
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("sqlqueue: complete: %w", err)
		case !acked[refOf(a.d).ID]:
			errs[i] = s.lost(a.d)
		}
	}
	if err == nil {
		s.e.ctrs.riddenAcks.Add(int64(len(acked)))
	}
	settle(riders, errs)
	if !handedOff {
		s.unblocked(ds...)
	}
}

func ridersRefs(as []*ridingAck) []Ref {
	refs := make([]Ref, len(as))
	for i, a := range as {
		refs[i] = refOf(a.d)
	}
	return refs
}

func (s *Source) flushComplete(ctx context.Context, ds []*transport.Delivery) []error {
	defer s.unblocked(ds...)
	return s.fenced(ctx, ds, s.e.d.Complete(s.q, refsOf(ds)), &countRef{"complete", &s.e.ctrs.completes})
}

// Retry implements transport.Source: the row returns to pending, due after
// delay, with the attempt's line appended to the headers'
// transport.MetadataAttemptErrors, group-committed.
func (s *Source) Retry(ctx context.Context, d *transport.Delivery, delay time.Duration, reason string) error {
	now := time.Now()
	if delay > 0 {
		s.retryDues.Add(now.Add(delay))
	}
	line := transport.AttemptLine(d.Attempt, now, reason)
	return s.settleErr("retry", d, s.retry.Do(ctx, retryItem{d: d, delay: delay, line: line}))
}

func (s *Source) flushRetry(ctx context.Context, items []retryItem) []error {
	ds := make([]*transport.Delivery, len(items))
	rows := make([]RetryRef, len(items))
	now := false
	for i, it := range items {
		ds[i] = it.d
		rows[i] = RetryRef{Ref: refOf(it.d), Delay: it.delay, Line: it.line}
		now = now || it.delay <= 0
	}
	if now { // rows due at once: don't leave them to the next poll
		defer localWake.notify(wakeKey{s.e.db, s.q.Name})
	}
	return s.fenced(ctx, ds, s.e.d.Retry(s.q, rows), &countRef{"retry", &s.e.ctrs.retries})
}

// Release implements transport.Source: every given prefetched row returns
// to pending in one fenced statement, attempts unchanged. Rows claimed
// straight into processing return to pending with the attempt their claim
// counted taken back (DirectDialect.ReleaseDirect), in a statement of their
// own.
func (s *Source) Release(ctx context.Context, ds []*transport.Delivery) error {
	// The listener is pausing or stopping: it won't claim, so it must not
	// be elected for wake-ups. Released rows are due at once: let another
	// source of this pool take them without waiting for its poll.
	s.w.idle.Store(false)
	defer localWake.notify(wakeKey{s.e.db, s.q.Name})
	var fetched, started []*transport.Delivery
	for _, d := range ds {
		if handleOf(d).started {
			started = append(started, d)
		} else {
			fetched = append(fetched, d)
		}
	}
	s.fetched.Add(-int64(len(fetched)))
	var errs []error
	for chunk := range slices.Chunk(fetched, s.cfg.SettleBatch) {
		errs = appendErrs(errs, s.fenced(ctx, chunk, s.e.d.Release(s.q, refsOf(chunk)), &countRef{"release", &s.e.ctrs.releases}))
	}
	if dd, ok := s.e.d.(DirectDialect); ok {
		for chunk := range slices.Chunk(started, s.cfg.SettleBatch) {
			errs = appendErrs(errs, s.fenced(ctx, chunk, dd.ReleaseDirect(s.q, refsOf(chunk)), &countRef{"release", &s.e.ctrs.releases}))
		}
	}
	return errors.Join(errs...)
}

// appendErrs appends the non-nil errors of errs to dst.
func appendErrs(dst, errs []error) []error {
	for _, err := range errs {
		if err != nil {
			dst = append(dst, err)
		}
	}
	return dst
}

// RenewInterval implements transport.Renewer: a third of the lease.
func (s *Source) RenewInterval() time.Duration { return s.cfg.Lease / 3 }

// Renew implements transport.Renewer: one fenced statement per batch.
func (s *Source) Renew(ctx context.Context, ds []*transport.Delivery) error {
	var errs []error
	for chunk := range slices.Chunk(ds, s.cfg.SettleBatch) {
		for _, err := range s.fenced(ctx, chunk, s.e.d.Renew(s.q, refsOf(chunk), s.cfg.Lease), &countRef{"renew", &s.e.ctrs.renews}) {
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// DeadLetter implements transport.Source: the row moves to the error table
// with reason, attempts, original headers and body, in one transaction,
// fenced.
func (s *Source) DeadLetter(ctx context.Context, d *transport.Delivery, _ *message.Message, reason string) error {
	sctx, cancel := s.stmtCtx(ctx)
	defer cancel()
	stmts := s.e.d.DeadLetter(s.e.names, s.q, refOf(d), reason)
	var ids []int64
	err := s.e.retryOutlasting(sctx, s.logger, "dead-letter", idempotent, func() error {
		var err error
		if len(stmts) == 1 {
			ids, err = runAll(sctx, s.e.db, &s.e.ctrs.deadLetters, stmts)
			return err
		}
		return inTx(sctx, s.e.db, &s.e.ctrs.txs, func(tx *sql.Tx) error {
			var err error
			ids, err = runAll(sctx, tx, &s.e.ctrs.deadLetters, stmts)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("sqlqueue: dead-letter row %s of %s: %w", d.ID, s.q.Name, err)
	}
	if len(ids) == 0 {
		return s.lost(d)
	}
	s.e.ctrs.deadLettered.Add(1)
	s.unblocked(d)
	return nil
}

// Wake implements transport.Waker.
func (s *Source) Wake() <-chan struct{} { return s.w.ch }

// TakeWakeHint implements transport.WakeHinter: the rows announced by the
// notifications (one per Publish call, per notify window, or per release)
// coalesced into the wake-ups this source received since the last call, as
// estimated from what earlier wake-ups found (hint.go).
func (s *Source) TakeWakeHint() int { return s.hints.take(int(s.w.hint.Swap(0))) }

// Close implements transport.Source: it stops the sweeper and waits for
// queued settlements to flush. Rows still leased are left to the sweeper.
// Idempotent.
func (s *Source) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		s.bgMu.Lock()
		s.bgClosed = true
		s.bgMu.Unlock()
		close(s.stopSweep)
		s.unhook()
		if s.idle != nil {
			releaseProber(s, s.idle)
		}
		var rerr error
		if s.rider != nil {
			rerr = s.rider.close(ctx) // before the coalescer: its stragglers go there
		}
		err = errors.Join(rerr, s.begin.Close(ctx), s.complete.Close(ctx), s.retry.Close(ctx))
		err = errors.Join(err, s.leaveFreedKeys(ctx))
		s.swept.Wait()
	})
	return err
}

type countRef struct {
	kind string
	n    *atomic.Int64
}
