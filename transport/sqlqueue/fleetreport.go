package sqlqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// FleetMember is what the fleet reporter needs of a subscriber: its
// listeners' states, and pausing and resuming one by name (every listener
// of that name). The Subscriber adapts its pipeline to it.
type FleetMember interface {
	ListenerStates() []transport.ListenerState
	// PauseListener stops the named listeners claiming and releases
	// their prefetched rows; they stay paused until ResumeListener.
	PauseListener(ctx context.Context, name string) error
	// ResumeListener undoes PauseListener.
	ResumeListener(name string)
}

// Fleet reporter tuning.
const (
	// fleetStaleSweepEvery: one tick in this many also deletes the rows
	// other instances left behind (ten of their intervals old).
	fleetStaleSweepEvery = 100
	// fleetLogEvery is the least time between two logs of failing ticks.
	fleetLogEvery = time.Minute
)

// fleetReporter is the goroutine a subscriber with a FleetInterval runs:
// every interval it reads the paused table and pauses or resumes its
// listeners to match, then writes one row per listener to the listeners
// table. A failing tick changes nothing in the listeners and is retried
// at the next interval; the subscriber's Close stops it, waits, and
// deletes its rows.
type fleetReporter struct {
	e        *engine
	f        FleetDialect
	m        FleetMember
	interval time.Duration
	timeout  time.Duration // per statement
	logger   watermill.LoggerAdapter
	create   bool // create the tables (not ManualSchema)

	instance, host string
	pid            int

	mu      sync.Mutex
	started bool
	closed  bool
	stop    context.CancelFunc
	done    chan struct{}

	// Counters, for tests and docs: statements sent, ticks finished,
	// upserts sent, statements of the last finished tick.
	stmts, ticks, upserts, lastTick atomic.Int64
	// As of the last finished tick, for consistent snapshots.
	doneStmts, doneUpserts atomic.Int64

	// Owned by the loop goroutine.
	ensured    bool
	ours       map[string]bool // listeners this reporter paused
	failing    bool
	lastLog    time.Time
	suppressed int
}

func newFleetReporter(e *engine, m FleetMember, cfg SubscriberConfig) (*fleetReporter, error) {
	f, err := fleetDialect(e.d)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown"
	}
	if len(host) > 200 {
		host = host[:200]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	pid := os.Getpid()
	return &fleetReporter{
		e: e, f: f, m: m, interval: cfg.FleetInterval, timeout: min(cfg.StatementTimeout, max(cfg.FleetInterval, time.Second)),
		logger: cfg.logger, create: !cfg.Tables.ManualSchema,
		host: host, pid: pid, instance: host + "/" + strconv.Itoa(pid) + "/" + hex.EncodeToString(b[:]),
		ours: map[string]bool{},
	}, nil
}

// start starts the loop once; a no-op after close.
func (r *fleetReporter) start() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.closed {
		return
	}
	r.started = true
	ctx, stop := context.WithCancel(context.Background())
	r.stop, r.done = stop, make(chan struct{})
	go r.loop(ctx)
}

// close stops the loop, waits for it, then deletes this instance's rows
// within timeout. Idempotent; safe before start.
func (r *fleetReporter) close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	wasStarted, wasClosed := r.started, r.closed
	r.closed = true
	stop, done := r.stop, r.done
	r.mu.Unlock()
	if !wasStarted || wasClosed {
		return nil
	}
	stop()
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	if err := query(ctx, r.e.db, &r.stmts, r.f.DeleteListeners(r.e.names, r.instance), nil); err != nil && !missingTable(r.e.d, err) {
		return fmt.Errorf("sqlqueue: deleting this subscriber's fleet rows (they go stale and are swept): %w", err)
	}
	return nil
}

func (r *fleetReporter) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		before := r.stmts.Load()
		err := guard.Run(func() error { return r.tick(ctx) })
		if ctx.Err() != nil {
			return
		}
		r.report(err)
		r.lastTick.Store(r.stmts.Load() - before)
		r.doneStmts.Store(r.stmts.Load())
		r.doneUpserts.Store(r.upserts.Load())
		r.ticks.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// report logs a failing tick: the first, then at most one a minute (with
// how many it left out), and the recovery.
func (r *fleetReporter) report(err error) {
	now := time.Now()
	switch {
	case err == nil && r.failing:
		r.failing = false
		guard.Do(func() {
			r.logger.Info("fleet status writes recovered", watermill.LogFields{"instance": r.instance})
		})
	case err == nil:
	case !r.failing || now.Sub(r.lastLog) >= fleetLogEvery:
		r.failing, r.lastLog = true, now
		n := r.suppressed
		r.suppressed = 0
		guard.Do(func() {
			r.logger.Error("fleet status write failed; listeners keep running, retrying every interval", err,
				watermill.LogFields{"instance": r.instance, "interval": r.interval, "failures_not_logged": n})
		})
	default:
		r.suppressed++
	}
}

// tick is one interval's work: apply the paused table, then upsert every
// listener's row. Its cost is one statement for the paused rows plus one
// per listener (and, once in fleetStaleSweepEvery ticks, one delete).
func (r *fleetReporter) tick(ctx context.Context) error {
	if !r.ensured && r.create {
		ectx, cancel := context.WithTimeout(ctx, r.timeout)
		err := ensureFleet(ectx, r.e.db, r.e.d, r.e.names, r.e.lockKey("schema"), &r.stmts, &r.stmts)
		cancel()
		if err != nil {
			return err
		}
	}
	r.ensured = true
	var errs []error
	if err := r.applyPaused(ctx); err != nil {
		errs = append(errs, err)
	}
	rows := r.rows(r.m.ListenerStates())
	for _, row := range rows {
		sctx, cancel := context.WithTimeout(ctx, r.timeout)
		r.upserts.Add(1)
		err := query(sctx, r.e.db, &r.stmts, r.f.UpsertListener(r.e.names, row), nil)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("listener %s: %w", row.Name, err))
			break // the next ones would most likely fail alike
		}
	}
	if r.ticks.Load()%fleetStaleSweepEvery == 0 {
		sctx, cancel := context.WithTimeout(ctx, r.timeout)
		if err := query(sctx, r.e.db, &r.stmts, r.f.DeleteStaleListeners(r.e.names), nil); err != nil {
			errs = append(errs, fmt.Errorf("deleting stale rows: %w", err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// applyPaused reads the paused table and pauses this subscriber's
// listeners of paused queues (again when one holds prefetched rows, which
// a claim in flight at the first Pause may have added), and resumes those
// it paused whose queue is no longer paused. A listener paused by someone
// else (its owner calling Pause) is left alone. When the read fails,
// nothing changes.
func (r *fleetReporter) applyPaused(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, r.timeout)
	ps, err := readPaused(rctx, r.e.db, r.e.d, r.e.names, &r.stmts)
	cancel()
	if err != nil {
		return fmt.Errorf("reading paused queues: %w", err)
	}
	paused := make(map[string]bool, len(ps))
	for _, p := range ps {
		paused[p.Queue] = true
	}
	seen := map[string]bool{}
	var errs []error
	for _, st := range r.m.ListenerStates() {
		seen[st.Name] = true
		switch {
		case paused[r.queueOf(st)]:
			if !r.ours[st.Name] && st.Status == transport.StatusPaused {
				continue // paused by its owner: theirs to resume
			}
			if r.ours[st.Name] && st.Buffered == 0 && st.Status != transport.StatusAccepting && st.Status != transport.StatusTooBusy {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, r.timeout)
			err := guard.Run(func() error { return r.m.PauseListener(pctx, st.Name) })
			cancel()
			r.ours[st.Name] = true
			if err != nil {
				errs = append(errs, fmt.Errorf("pausing %s: %w", st.Name, err))
			}
		case r.ours[st.Name]:
			delete(r.ours, st.Name)
			if err := guard.Call(func() { r.m.ResumeListener(st.Name) }); err != nil {
				errs = append(errs, fmt.Errorf("resuming %s: %w", st.Name, err))
			}
		}
	}
	for name := range r.ours {
		if !seen[name] {
			delete(r.ours, name)
		}
	}
	return errors.Join(errs...)
}

// queueOf is the unquoted queue table a listener consumes: its
// destination is the topic, consumed as the subscriber's group.
func (r *fleetReporter) queueOf(st transport.ListenerState) string {
	return r.e.queue(st.Destination.Name, st.Destination.ConsumerGroup).Name
}

// rows turns listener states into rows; listeners sharing a name (two
// Subscribe calls to one topic) get "#2", "#3"… in the order they started.
func (r *fleetReporter) rows(states []transport.ListenerState) []ListenerRow {
	sort.SliceStable(states, func(i, j int) bool {
		if states[i].Name != states[j].Name {
			return states[i].Name < states[j].Name
		}
		return states[i].StartedAt.Before(states[j].StartedAt)
	})
	out := make([]ListenerRow, 0, len(states))
	for i, st := range states {
		name := st.Name
		if n := dupIndex(states, i); n > 1 {
			name += "#" + strconv.Itoa(n)
		}
		row := ListenerRow{
			Instance: r.instance, Name: name, Queue: r.queueOf(st), Host: r.host, PID: r.pid,
			Status: st.Status.String(), Loop: st.Loop.String(),
			Wave: st.Wave, Buffered: st.Buffered, InFlight: st.InFlight, BatchPending: st.BatchPending,
			Latched: st.Latched, Faulted: st.Faulted, Rebuilds: st.Rebuilds,
			LastReceive: st.LastReceive, StartedAt: st.StartedAt, Interval: r.interval,
		}
		if st.Fault != "" {
			row.Fault, row.FaultAt = cut(st.Fault, MaxFaultText), st.FaultAt
		}
		out = append(out, row)
	}
	return out
}

// dupIndex is 1 for the first listener of its name in sorted states, 2 for
// the second…
func dupIndex(states []transport.ListenerState, i int) int {
	n := 1
	for j := i - 1; j >= 0 && states[j].Name == states[i].Name; j-- {
		n++
	}
	return n
}

// cut shortens s to at most max bytes at a rune boundary, ending with "…".
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[:max-len("…")]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// FleetStats counts a subscriber's fleet reporting (see
// SubscriberConfig.FleetInterval).
type FleetStats struct {
	// Instance is the id of this subscriber's rows in the listeners table
	// ("" when FleetInterval is 0).
	Instance string
	// Ticks counts the intervals reported (failed ones too).
	Ticks int64
	// Statements counts every statement the reporter sent in those
	// intervals, the tables' creation included; Upserts those writing a
	// listener's row.
	Statements, Upserts int64
	// LastTick is the statements of the last finished interval: one read
	// of the paused table plus one upsert per listener (plus, one interval
	// in a hundred, the delete of stale rows).
	LastTick int64
}

// FleetStats returns the fleet reporter's counts.
func (s *Subscriber) FleetStats() FleetStats { return s.fleet.stats() }

func (r *fleetReporter) stats() FleetStats {
	if r == nil {
		return FleetStats{}
	}
	for {
		n := r.ticks.Load()
		st := FleetStats{Instance: r.instance, Ticks: n, Statements: r.doneStmts.Load(), Upserts: r.doneUpserts.Load(), LastTick: r.lastTick.Load()}
		if r.ticks.Load() == n {
			return st
		}
	}
}

// FleetReporter reports the listeners of any FleetMember to the fleet
// tables and applies the paused table to them, as a Subscriber with a
// FleetInterval does for its own: for a pipeline built by hand
// (receiver.NewSubscriber over NewSource, or a decorated source; see
// ReceiverMember).
type FleetReporter struct{ r *fleetReporter }

// NewFleetReporter validates cfg (DB, Tables, FleetInterval > 0 and
// StatementTimeout are used; DB is required) and returns a reporter for m
// that writes d's statements and logs to logger. It starts nothing.
func NewFleetReporter(d Dialect, cfg SubscriberConfig, m FleetMember, logger watermill.LoggerAdapter) (*FleetReporter, error) {
	if err := validateFor(d, cfg.problems(d, true)); err != nil {
		return nil, err
	}
	cfg.logger = logger
	if cfg.FleetInterval <= 0 {
		return nil, fmt.Errorf("%w: FleetInterval: required, got %s", transport.ErrInvalidConfig, cfg.FleetInterval)
	}
	cfg = cfg.withDefaults()
	r, err := newFleetReporter(newEngine(cfg.DB, d, cfg.Tables), m, cfg)
	if err != nil {
		return nil, err
	}
	return &FleetReporter{r}, nil
}

// Start starts the reporting goroutine (the first report at once). A
// no-op when started or closed.
func (f *FleetReporter) Start() { f.r.start() }

// Close stops the goroutine, waits for it and deletes the reported rows.
// Idempotent.
func (f *FleetReporter) Close() error { return f.r.close() }

// Stats returns the reporter's counts.
func (f *FleetReporter) Stats() FleetStats { return f.r.stats() }
