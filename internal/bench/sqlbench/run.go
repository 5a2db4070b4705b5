package sqlbench

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// metadataSentAt carries a message's publish time (Unix nanoseconds) for the
// end-to-end latency.
const metadataSentAt = "sqlbench_sent_ns"

// topic is the topic every run uses, in its own schema.
const topic = "sqlbench"

// RunConfig is one strategy run: a number of competing instances consuming
// either a backlog (drain) or a steady publish rate (steady).
type RunConfig struct {
	Scenario     string
	Strategy     string
	Instances    int
	Concurrency  int           // handler concurrency per instance
	Handler      time.Duration // simulated work per message
	InstancePool int           // connections per instance

	// Backlog is published before the subscribers start (drain).
	Backlog int
	// Rate and Duration drive a steady publisher (steady) that publishes
	// PublishBatch messages per Publish call.
	Rate         float64
	Duration     time.Duration
	PublishBatch int
	// Grace bounds the wait for the last published messages after a steady
	// publisher stops; Timeout bounds a drain.
	Grace   time.Duration
	Timeout time.Duration

	// Progress, when set, receives this run's completion in [0, 1].
	Progress func(fraction float64)
}

// harness runs strategies on one database, back to back.
type harness struct {
	db database
	// runNotes are the current run's notes.
	runNotes []string
	// effectErrs counts the current run's failed effects (effect.go), and
	// firstEffectErr is the first. closeEffectErrs counts those that failed
	// once the subscribers were closing: a redelivery that closing cut
	// short (watermill-sql cancels the message's context, and with it its
	// transaction), not a failure of the run.
	effectMu        sync.Mutex
	effectErrs      int
	firstEffectErr  error
	closeEffectErrs int
}

// effectErr records a handler's failed effect (the message is nacked);
// closing tells whether the subscribers had begun to close.
func (h *harness) effectErr(err error, closing bool) {
	h.effectMu.Lock()
	defer h.effectMu.Unlock()
	if closing {
		h.closeEffectErrs++
		return
	}
	if h.effectErrs++; h.firstEffectErr == nil {
		h.firstEffectErr = err
	}
}

func newHarness(db database) *harness { return &harness{db: db} }

// Close closes the database's own pools.
func (h *harness) Close() error { return h.db.close() }

// tracker records processed messages.
type tracker struct {
	mu        sync.Mutex
	seen      map[string]struct{}
	dups      int
	latencies []float64 // ms, publish to ack
	lastAck   time.Time
	target    int // 0: not known yet
	done      chan struct{}
	processed atomic.Int64

	// marks: when processed reaches marks[i].at, marks[i].c is closed
	// (drains sample the server's CPU there; see midWindow).
	marks []trackerMark
}

type trackerMark struct {
	at int
	c  chan struct{}
}

// mark returns a channel closed once n distinct messages are processed.
// Call it before the run starts.
func (t *tracker) mark(n int) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := make(chan struct{})
	t.marks = append(t.marks, trackerMark{at: n, c: c})
	return c
}

func newTracker() *tracker {
	return &tracker{seen: map[string]struct{}{}, done: make(chan struct{})}
}

// setTarget sets how many distinct messages end the run.
func (t *tracker) setTarget(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.target = n
	t.checkLocked()
}

func (t *tracker) checkLocked() {
	if t.target > 0 && len(t.seen) >= t.target {
		select {
		case <-t.done:
		default:
			close(t.done)
		}
	}
}

func (t *tracker) record(msg *message.Message, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.seen[msg.UUID]; dup {
		t.dups++
		return
	}
	t.seen[msg.UUID] = struct{}{}
	t.processed.Add(1)
	for _, m := range t.marks {
		if len(t.seen) == m.at {
			close(m.c)
		}
	}
	if ns, err := strconv.ParseInt(msg.Metadata.Get(metadataSentAt), 10, 64); err == nil {
		t.latencies = append(t.latencies, float64(now.UnixNano()-ns)/1e6)
	}
	t.lastAck = now
	t.checkLocked()
}

// newMessages returns n messages with a small JSON payload.
func newMessages(n int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(`{"n":`+strconv.Itoa(i)+`,"pad":"0123456789abcdef0123456789abcdef"}`))
	}
	return msgs
}

func stamp(msgs []*message.Message) {
	ns := strconv.FormatInt(time.Now().UnixNano(), 10)
	for _, m := range msgs {
		m.Metadata.Set(metadataSentAt, ns)
	}
}

func uniqueSchema(prefix string) string {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// Run runs one strategy under rc on h's database, in a fresh schema, and
// measures it.
func (h *harness) Run(ctx context.Context, rc RunConfig) (res bench.Result, err error) {
	if !slices.Contains(h.db.strategies(), rc.Strategy) {
		return res, fmt.Errorf("sqlbench: strategy %q does not run on %s", rc.Strategy, h.db.name())
	}
	rc.InstancePool = orDefault(rc.InstancePool, DefaultInstancePool)
	rc.Concurrency = orDefault(rc.Concurrency, 1)
	rc.PublishBatch = orDefault(rc.PublishBatch, 1)
	progress := rc.Progress
	if progress == nil {
		progress = func(float64) {}
	}

	run, err := h.db.newRun(ctx)
	if err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := run.drop(dctx); derr != nil && err == nil {
			err = fmt.Errorf("sqlbench: drop the run's schema: %w", derr)
		}
	}()
	st, err := run.strategy(rc.Strategy)
	if err != nil {
		return res, err
	}

	// The publisher's pool.
	aux, err := run.publisherPool()
	if err != nil {
		return res, err
	}
	defer aux.Close()
	if err := st.initialize(aux, topic); err != nil {
		return res, fmt.Errorf("sqlbench: %s: initialize: %w", st.name, err)
	}
	pub, err := st.newPublisher(aux)
	if err != nil {
		return res, fmt.Errorf("sqlbench: %s: publisher: %w", st.name, err)
	}
	defer pub.Close()
	for sent := 0; sent < rc.Backlog; {
		n := min(1000, rc.Backlog-sent)
		msgs := newMessages(n)
		stamp(msgs)
		if err := pub.Publish(topic, msgs...); err != nil {
			return res, fmt.Errorf("sqlbench: %s: publish backlog: %w", st.name, err)
		}
		sent += n
	}

	if a, ok := run.(analyzer); ok && rc.Backlog > 0 {
		if err := a.analyze(ctx); err != nil {
			return res, fmt.Errorf("sqlbench: analyze the backlog: %w", err)
		}
	}
	// The measured window starts here.
	ctr := NewCounter(st.isReceive)
	if err := run.begin(ctx); err != nil {
		return res, err
	}
	tr := newTracker()
	if rc.Backlog > 0 {
		tr.setTarget(rc.Backlog)
	}
	var mid *midWindow
	if rc.Backlog >= 100 && rc.Rate == 0 {
		if mid = run.midWindow(ctx, tr, rc.Backlog/10, rc.Backlog*9/10); mid != nil {
			defer mid.stop()
		}
	}
	var clientMid *midWindow
	if rc.Backlog >= 100 && rc.Rate == 0 {
		clientMid = startMidWindow(processCPU, func(a, b time.Duration) time.Duration { return a - b }, tr, rc.Backlog/10, rc.Backlog*9/10)
		defer clientMid.stop()
	}
	start := time.Now()

	var (
		pools    []*sql.DB
		insts    []instance
		handlers sync.WaitGroup
		// closing is set once the measured run is over, before the
		// subscribers close (see harness.effectErr).
		closing atomic.Bool
	)
	closeAll := func() error {
		// All at once, as separate processes would stop: closing one by
		// one lets the others keep consuming meanwhile.
		errs := make([]error, len(insts))
		var wg sync.WaitGroup
		for i, in := range insts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = in.Close()
			}()
		}
		wg.Wait()
		handlers.Wait()
		for _, db := range pools {
			errs = append(errs, db.Close())
		}
		insts, pools = nil, nil
		return errors.Join(errs...)
	}
	defer func() { _ = closeAll() }()
	subCtx, cancelSubs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSubs()
	for range rc.Instances {
		db, err := run.instancePool(rc.InstancePool, ctr)
		if err != nil {
			return res, err
		}
		pools = append(pools, db)
		in, err := st.newInstance(db, rc.Concurrency)
		if err != nil {
			return res, fmt.Errorf("sqlbench: %s: subscriber: %w", st.name, err)
		}
		insts = append(insts, in)
		ch, err := in.Subscribe(subCtx, topic)
		if err != nil {
			return res, fmt.Errorf("sqlbench: %s: subscribe: %w", st.name, err)
		}
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			for msg := range ch {
				handlers.Add(1)
				go func() {
					defer handlers.Done()
					time.Sleep(rc.Handler) // the simulated work
					if in.effect != nil {
						if err := in.effect(msg); err != nil {
							h.effectErr(err, closing.Load())
							msg.Nack()
							return
						}
					}
					tr.record(msg, time.Now())
					msg.Ack()
				}()
			}
		}()
	}

	// Progress while the run goes.
	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	progressDone.Add(1)
	go func() {
		defer progressDone.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				if rc.Backlog > 0 {
					progress(float64(tr.processed.Load()) / float64(rc.Backlog))
				} else {
					progress(min(1, float64(time.Since(start))/float64(rc.Duration+rc.Grace/2)))
				}
			}
		}
	}()
	defer func() {
		close(stopProgress)
		progressDone.Wait()
	}()

	published := rc.Backlog
	timedOut := false
	if rc.Rate > 0 {
		pubStart := time.Now()
		n, err := publishSteady(ctx, pub, rc)
		if took := time.Since(pubStart); took > rc.Duration+time.Second {
			h.runNotes = append(h.runNotes, fmt.Sprintf("publishing took %s (behind schedule)", took.Round(time.Millisecond)))
		}
		published += n
		if err != nil {
			return res, err
		}
		tr.setTarget(published)
		select {
		case <-tr.done:
		case <-time.After(rc.Grace):
			timedOut = true
		case <-ctx.Done():
			return res, ctx.Err()
		}
	} else {
		select {
		case <-tr.done:
		case <-time.After(rc.Timeout):
			timedOut = true
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}

	// The measured time ends at the last ack. Counters are read once the
	// subscribers have closed, so that every statement they sent is
	// finished and counted alike by the driver and by the server (polls
	// after the last message and the release on close are the strategy's
	// cost too); what the server can only tell while the instances are
	// open is read before they close (dbRun.lastAck).
	tr.mu.Lock()
	processed := len(tr.seen)
	end := tr.lastAck
	lat := slices.Clone(tr.latencies)
	dups := tr.dups
	tr.mu.Unlock()
	if err := run.lastAck(ctx); err != nil {
		return res, err
	}
	var eng engineTotals
	for _, in := range insts {
		eng.add(in)
	}
	opened := slices.Clone(insts)
	closeStart := time.Now()
	closing.Store(true)
	if err := closeAll(); err != nil {
		return res, fmt.Errorf("sqlbench: %s: close: %w", st.name, err)
	}
	closeTook := time.Since(closeStart)
	snap := ctr.Snapshot()
	statements, receives, empty := snap.Statements, snap.Receives, snap.EmptyClaims
	if !h.db.tracesStatements() {
		// The engine's own counts, once closed like the driver's: every
		// statement it sent (BEGIN and COMMIT included), its claims and
		// the claims that found nothing.
		var closed engineTotals
		for _, in := range opened {
			closed.add(in)
		}
		statements, receives, empty = closed.st.RoundTrips(), closed.st.Claims, closed.st.EmptyClaims
	}
	per := func(v float64) float64 {
		if processed == 0 {
			return 0
		}
		return v / float64(processed)
	}
	server := map[string]float64{}
	dbNotes, err := run.end(ctx, server, per)
	if err != nil {
		return res, err
	}
	progress(1)

	if end.IsZero() {
		end = time.Now()
	}
	elapsed := end.Sub(start)
	res = bench.Result{
		Scenario:  rc.Scenario,
		Strategy:  st.name,
		Database:  h.db.resultDatabase(),
		Instances: rc.Instances,
		Messages:  processed,
		Duration:  elapsed,
		Metrics:   server,
	}
	m := res.Metrics
	m["msg_per_s"] = float64(processed) / max(elapsed.Seconds(), 1e-9)
	m["round_trips_per_msg"] = per(float64(snap.RoundTrips))
	m["statements_per_msg"] = per(float64(statements))
	m["receives_per_msg"] = per(float64(receives + eng.peeks))
	m["empty_claims_per_msg"] = per(float64(empty + eng.emptyPeeks))
	m["connections"] = float64(snap.Conns)
	m["published"] = float64(published)
	m["backlog_left"] = float64(published - processed)
	m["duplicates"] = float64(dups)
	if mid != nil {
		if v, ok := mid.result(); ok {
			m["db_cpu_mid_ms_per_msg"] = v
		}
	}
	if clientMid != nil {
		if v, ok := clientMid.result(); ok {
			m["client_cpu_mid_ms_per_msg"] = v
		}
	}
	if rc.Rate > 0 && len(lat) > 0 {
		slices.Sort(lat)
		m["p50_ms"] = percentile(lat, 0.50)
		m["p99_ms"] = percentile(lat, 0.99)
		m["max_ms"] = lat[len(lat)-1]
	}
	var notes []string
	if eng.has {
		notes = append(notes, fmt.Sprintf("engine: claims=%d empty=%d rows=%d started=%d begins=%d completes=%d ridden=%d renews=%d releases=%d sweeps=%d analyzes=%d",
			eng.st.Claims, eng.st.EmptyClaims, eng.st.ClaimedRows, eng.st.StartedRows, eng.st.Begins, eng.st.Completes, eng.st.RiddenAcks, eng.st.Renews, eng.st.Releases, eng.st.Sweeps, eng.st.Analyzes))
	}
	if eng.peeks > 0 {
		notes = append(notes, fmt.Sprintf("peeks=%d (empty %d)", eng.peeks, eng.emptyPeeks))
	}
	if closeTook > time.Second {
		notes = append(notes, fmt.Sprintf("closing the subscribers took %s", closeTook.Round(time.Millisecond)))
	}
	if timedOut {
		notes = append(notes, fmt.Sprintf("stopped with %d of %d messages processed", processed, published))
	}
	h.effectMu.Lock()
	if h.effectErrs > 0 {
		notes = append(notes, fmt.Sprintf("%d effects failed (nacked), the first: %v", h.effectErrs, h.firstEffectErr))
	}
	if h.closeEffectErrs > 0 {
		notes = append(notes, fmt.Sprintf("%d deliveries in flight at close ended without their effect", h.closeEffectErrs))
	}
	h.effectErrs, h.firstEffectErr, h.closeEffectErrs = 0, nil, 0
	h.effectMu.Unlock()
	notes = append(notes, dbNotes...)
	notes = append(notes, h.runNotes...)
	h.runNotes = nil
	notes = append(notes, h.db.notes()...)
	res.Notes = joinNotes(notes)
	return res, nil
}

// engineTotals sums the instances' own counts.
type engineTotals struct {
	has               bool
	st                sqlqueue.Stats
	peeks, emptyPeeks int64
}

func (e *engineTotals) add(in instance) {
	if in.engine != nil {
		e.has = true
		addStats(&e.st, in.engine())
	}
	if in.peeks != nil {
		p, ep := in.peeks()
		e.peeks += p
		e.emptyPeeks += ep
	}
}

// publishSteady publishes at rc.Rate for rc.Duration from 4 goroutines on
// an even schedule and returns how many it published.
func publishSteady(ctx context.Context, pub message.Publisher, rc RunConfig) (int, error) {
	const publishers = 4
	interval := time.Duration(float64(time.Second) * float64(rc.PublishBatch) / rc.Rate)
	calls := int(rc.Duration / interval)
	start := time.Now()
	var (
		sent  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	for g := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := g; k < calls; k += publishers {
				at := start.Add(time.Duration(k) * interval)
				if d := time.Until(at); d > 0 {
					select {
					case <-time.After(d): // pacing the load, not synchronising
					case <-ctx.Done():
						return
					}
				}
				msgs := newMessages(rc.PublishBatch)
				stamp(msgs)
				if err := pub.Publish(topic, msgs...); err != nil {
					errMu.Lock()
					first = cmpErr(first, err)
					errMu.Unlock()
					return
				}
				sent.Add(int64(len(msgs)))
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return int(sent.Load()), fmt.Errorf("sqlbench: steady publish: %w", first)
	}
	return int(sent.Load()), ctx.Err()
}

func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func joinNotes(ns []string) string { return strings.Join(ns, "; ") }

// midWindow measures the server's CPU per message over the middle of a
// drain (from the lo-th to the hi-th processed message), leaving out what
// does not grow with the messages: the instances' connections starting
// (a backend forks, authenticates and fills its catalog caches; each
// prepared statement is planned once per connection) and closing. A
// whole-run figure divides those by the messages drained, and with 12
// instances × 4 connections over a drain of about a second they are a
// large share of it.
type midWindow struct {
	done    chan struct{}
	quit    chan struct{}
	quitOne sync.Once
	cpu     time.Duration
	msgs    int64
	ok      bool
}

// startMidWindow samples the server's CPU with sample when the lo-th and the
// hi-th message are processed; since is the CPU used between two samples.
func startMidWindow[S any](sample func() (S, error), since func(after, before S) time.Duration, tr *tracker, lo, hi int) *midWindow {
	w := &midWindow{done: make(chan struct{}), quit: make(chan struct{})}
	loC, hiC := tr.mark(lo), tr.mark(hi)
	go func() {
		defer close(w.done)
		select {
		case <-loC:
		case <-w.quit:
			return
		}
		n0 := tr.processed.Load()
		s0, err := sample()
		if err != nil {
			return
		}
		select {
		case <-hiC:
		case <-w.quit:
			return
		}
		s1, err := sample()
		n1 := tr.processed.Load()
		if err != nil || n1 <= n0 {
			return
		}
		w.cpu, w.msgs, w.ok = since(s1, s0), n1-n0, true
	}()
	return w
}

// processCPU is this process's CPU time so far (user and system): the
// instances', the harness's and the handlers' alike.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// stop ends the sampling goroutine and waits for it.
func (w *midWindow) stop() {
	w.quitOne.Do(func() { close(w.quit) })
	<-w.done
}

// result returns the window's DB CPU in milliseconds per message, once the
// drain passed both marks.
func (w *midWindow) result() (float64, bool) {
	w.stop()
	if !w.ok {
		return 0, false
	}
	return float64(w.cpu) / float64(time.Millisecond) / float64(w.msgs), true
}
