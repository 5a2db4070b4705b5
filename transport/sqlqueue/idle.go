package sqlqueue

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// The idle path. A source whose claim came back empty parks: its receive
// loop still runs a wave after every empty delay (the wave controller is
// unchanged), but Claim answers such a wave empty without a round trip
// (Stats.SkippedClaims) until a wake-up arrives. What wakes a parked
// source:
//
//   - an in-process publish, release or immediate retry (the hub);
//   - a notification on the pool's LISTEN connection (PostgreSQL);
//   - the pool's prober: one MultiProbe statement for every parked queue
//     of the pool, run on an interval that starts at the smallest empty
//     delay of the pool's subscribers, doubles after each probe that found
//     nothing, up to SubscriberConfig.IdleProbeMax, and starts over after
//     any wake-up, any claim that found rows and any probe that found a due
//     row. A probe that sees rows falling due later (delayed messages,
//     backed-off retries) looks again when the earliest falls due.
//
// So a row that reaches a queue without a wake-up reaching this pool (a
// publisher in another process without NOTIFY, an outbox transaction on
// another client, a notification lost during a leader hand-off) is claimed
// within IdleProbeMax plus the wake-up debounce, and an idle pool costs one
// statement per IdleProbeMax whatever its number of queues.

// idleProbeFloor is the smallest probe interval (subscribers with a zero
// or negative empty delay poll through their own claims anyway).
const idleProbeFloor = 50 * time.Millisecond

// probeChunk is the most queues one MultiProbe statement checks (SQLite
// refuses a compound SELECT of more than 500 terms; a pool with more
// parked queues runs one statement per chunk).
const probeChunk = 200

// dueSlack is added to the earliest future due time before probing again,
// so the row is due when the probe runs (the database rounds to the
// millisecond; clocks of client and server tick apart).
const dueSlack = 5 * time.Millisecond

// idleSchedule is the prober's interval: pure logic, no clock.
type idleSchedule struct {
	base, max, cur time.Duration
}

func newIdleSchedule(base, hi time.Duration) idleSchedule {
	base = min(max(base, idleProbeFloor), hi)
	return idleSchedule{base: base, max: hi, cur: base}
}

// reset starts the interval over (activity: a wake-up, found rows).
func (s *idleSchedule) reset() { s.cur = s.base }

// next records a probe's outcome and returns the wait until the next one:
// the base interval after a probe that found a due row, otherwise the
// current interval, doubled for the time after (up to max), and never
// later than nextDue (> 0: when the earliest future row falls due).
func (s *idleSchedule) next(found bool, nextDue time.Duration) time.Duration {
	if found {
		s.cur = s.base
		return s.cur
	}
	wait := s.cur
	s.cur = min(s.cur*2, s.max)
	if nextDue > 0 {
		wait = min(wait, nextDue+dueSlack)
	}
	return wait
}

// ProbeResult is one queue's row of a MultiProbe statement.
type ProbeResult struct {
	// Queue is the unquoted queue table name (Queue.Name).
	Queue string
	// Ready: a pending row is due and not expired.
	Ready bool
	// NextDue is how long until the earliest pending row that is not due
	// yet falls due; zero when there is none.
	NextDue time.Duration
	// Empty: the table has no row at all (nothing for the sweeper).
	Empty bool
}

// probers holds one prober per pool, shared by every subscriber on that
// pool (reference counted), like listeners.
var (
	probersMu sync.Mutex
	probers   = map[*sql.DB]*prober{}
)

// prober runs one pool's shared idle probe. It is started by the first
// parkable source of the pool and stopped by the last one's Close.
type prober struct {
	db     *sql.DB
	d      MultiProber
	clock  transport.Clock
	ctrs   *Counters
	logger watermill.LoggerAdapter
	stmtTO time.Duration

	refs int // guarded by probersMu

	mu      sync.Mutex
	sched   idleSchedule
	queues  map[string]*probeQueue
	maxCap  time.Duration // IdleProbeMax of the registrants (smallest)
	baseCap time.Duration // empty delay of the registrants (smallest)

	lastOK atomic.Int64  // when a probe or a ping of the pool last succeeded, Unix ns
	active atomic.Bool   // activity since the last probe: start the interval over
	urgent atomic.Bool   // probe at once (wake-ups may have been lost)
	soon   atomic.Int64  // probe by then (Unix ns of the clock; 0: none): dueSoon
	kick   chan struct{} // cap 1: recompute the wait now
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// probeQueue is one queue of the pool as the prober sees it.
type probeQueue struct {
	q    Queue
	srcs map[*Source]struct{}
	// clean: when the last probe saw the table empty (zero: it did not,
	// or no probe yet).
	clean time.Time
}

// acquireProber returns db's prober, starting it if needed, registered for
// s; release it with releaseProber.
func acquireProber(s *Source, d MultiProber) *prober {
	probersMu.Lock()
	defer probersMu.Unlock()
	p := probers[s.e.db]
	if p == nil {
		p = &prober{
			db: s.e.db, d: d, clock: s.cfg.Pipeline.Clock, ctrs: s.e.ctrs, logger: s.cfg.logger,
			stmtTO: s.cfg.ClaimTimeout, queues: map[string]*probeQueue{},
			kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		}
		probers[s.e.db] = p
		go p.run()
	}
	p.refs++
	p.register(s)
	return p
}

func releaseProber(s *Source, p *prober) {
	p.unregister(s)
	probersMu.Lock()
	p.refs--
	last := p.refs == 0
	if last && probers[p.db] == p {
		delete(probers, p.db)
	}
	probersMu.Unlock()
	if last {
		p.close()
	}
}

func (p *prober) register(s *Source) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pq := p.queues[s.q.Name]
	if pq == nil {
		pq = &probeQueue{q: s.q, srcs: map[*Source]struct{}{}}
		p.queues[s.q.Name] = pq
	}
	pq.srcs[s] = struct{}{}
	maxCap, baseCap := s.cfg.IdleProbeMax, max(s.cfg.Pipeline.EmptyDelay, idleProbeFloor)
	if p.maxCap == 0 || maxCap < p.maxCap {
		p.maxCap = maxCap
	}
	if p.baseCap == 0 || baseCap < p.baseCap {
		p.baseCap = baseCap
	}
	p.sched = newIdleSchedule(p.baseCap, p.maxCap)
}

func (p *prober) unregister(s *Source) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pq := p.queues[s.q.Name]; pq != nil {
		delete(pq.srcs, s)
		if len(pq.srcs) == 0 {
			delete(p.queues, s.q.Name)
		}
	}
}

// wake starts the interval over: rows arrived or may arrive soon. Safe to
// call from any goroutine; cheap.
func (p *prober) wake() {
	if p.active.CompareAndSwap(false, true) {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// probeSoon asks db's prober, if any, to probe at once, and reports
// whether there was one.
func probeSoon(db *sql.DB) bool {
	probersMu.Lock()
	p := probers[db]
	probersMu.Unlock()
	if p == nil {
		return false
	}
	p.urgent.Store(true)
	select {
	case p.kick <- struct{}{}:
	default:
	}
	return true
}

// dueSoon tells db's prober, if any, that rows inserted by this process
// fall due in d (> 0): it probes then, when that is sooner than its next
// probe. The insert's wake-up finds them not due yet and the source parks,
// and the probe interval starting over at that wake-up is the empty delay
// (1s by default), so without it a row due sooner was claimed at that
// probe: 500ms late for a 500ms delay on an idle queue.
func dueSoon(db *sql.DB, d time.Duration) {
	if d <= 0 {
		return // nothing delayed: every publish passes here
	}
	probersMu.Lock()
	p := probers[db]
	probersMu.Unlock()
	if p == nil {
		return
	}
	at := p.clock.Now().Add(d + dueSlack).UnixNano()
	for {
		cur := p.soon.Load()
		if cur != 0 && cur <= at || p.soon.CompareAndSwap(cur, at) {
			break
		}
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// parked tells the prober a source of it has parked (it probes only queues
// with a parked source; it may have been waiting for none).
func (p *prober) parked() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// cleanSince reports whether a probe at or after t saw table empty.
func (p *prober) cleanSince(table string, t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	pq := p.queues[table]
	return pq != nil && !pq.clean.IsZero() && !pq.clean.Before(t)
}

// parkedQueues returns the queues with at least one parked source, in
// name order: the same set gives the same probe statements (and chunks),
// whose plans the database then reuses.
func (p *prober) parkedQueues() []Queue {
	p.mu.Lock()
	defer p.mu.Unlock()
	var qs []Queue
	for _, pq := range p.queues {
		for s := range pq.srcs {
			if s.parked.Load() {
				qs = append(qs, pq.q)
				break
			}
		}
	}
	slices.SortFunc(qs, func(a, b Queue) int { return strings.Compare(a.Name, b.Name) })
	return qs
}

func (p *prober) run() {
	defer close(p.done)
	var (
		timer    <-chan time.Time // the next probe; nil: none (nothing parked)
		deadline time.Time
	)
	arm := func(wait time.Duration) {
		deadline, timer = p.clock.Now().Add(wait), p.clock.After(wait)
	}
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
			if p.urgent.Swap(false) {
				break // probe now
			}
			rearmed := false
			if p.active.Swap(false) { // activity: the interval starts over
				p.mu.Lock()
				p.sched.reset()
				base := p.sched.cur
				p.mu.Unlock()
				if timer == nil || p.clock.Now().Add(base).Before(deadline) {
					arm(base)
				}
				rearmed = true
			}
			if at := p.soon.Swap(0); at != 0 { // rows of ours fall due then
				rearmed = true
				now := p.clock.Now()
				if wait := time.Unix(0, at).Sub(now); timer == nil || wait < deadline.Sub(now) {
					if wait <= 0 {
						break // probe now
					}
					arm(wait)
				}
			}
			if rearmed || timer != nil {
				continue // or a source parked: the pending probe covers it
			}
		case <-timer:
		}
		if wait := p.probe(); wait > 0 {
			arm(wait)
		} else {
			timer = nil
		}
	}
}

// probe runs one MultiProbe over the parked queues and returns the wait
// until the next one (0: nothing parked, wait for a kick).
func (p *prober) probe() time.Duration {
	qs := p.parkedQueues()
	if len(qs) == 0 {
		return 0
	}
	if p.active.Swap(false) {
		p.mu.Lock()
		p.sched.reset()
		p.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.stmtTO)
	defer cancel()
	at := p.clock.Now()
	var (
		res []ProbeResult
		err error
	)
	for chunk := range slices.Chunk(qs, probeChunk) {
		err = query(ctx, p.db, &p.ctrs.probes, p.d.MultiProbe(chunk), func(r *sql.Rows) error {
			var (
				pr   ProbeResult
				next sql.NullInt64
			)
			if err := r.Scan(&pr.Queue, &pr.Ready, &next, &pr.Empty); err != nil {
				return err
			}
			if next.Valid && next.Int64 > 0 {
				pr.NextDue = time.Duration(next.Int64) * time.Millisecond
			}
			res = append(res, pr)
			return nil
		})
		if err != nil {
			break
		}
	}
	var wake []string
	defer func() { // runs after p.mu is released: no lock held across the hub
		for _, t := range wake {
			localWake.notify(wakeKey{p.db, t})
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		// Wake every parked queue: their sources' own claims report the
		// error (or find the rows) and the receive loop backs off.
		guard.Do(func() { p.logger.Error("idle probe failed; waking the parked queues", err, nil) })
		p.sched.reset()
		for _, q := range qs {
			wake = append(wake, q.Name)
		}
		return p.sched.cur
	}
	p.lastOK.Store(time.Now().UnixNano())
	found := false
	var nextDue time.Duration
	for _, r := range res {
		pq := p.queues[r.Queue]
		if pq != nil {
			pq.clean = time.Time{}
			if r.Empty {
				pq.clean = at
			}
		}
		if r.Ready {
			found = true
			p.ctrs.probeHits.Add(1)
			wake = append(wake, r.Queue)
		}
		if r.NextDue > 0 && (nextDue == 0 || r.NextDue < nextDue) {
			nextDue = r.NextDue
		}
	}
	return p.sched.next(found, nextDue)
}

func (p *prober) close() {
	p.once.Do(func() {
		close(p.stop)
		<-p.done
	})
}
