package receiver

import (
	"time"

	"context"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// A pipe is what a listener drives: the stage between its receive loop and
// Watermill. The listener uses one pipe until it faults or closes, then
// builds a new one; *stage is the implementation (tests substitute others).
type pipe interface {
	// Push hands claimed deliveries to the stage. It never blocks; the loop
	// claims no more than Free reported.
	Push(ds []*transport.Delivery)
	// Reserve takes, without waiting, up to n of the concurrency permits
	// free now, for deliveries a transport.DirectClaimer claims straight
	// into processing, and returns how many it took. It leaves one free
	// permit per buffered delivery: those are theirs. Every reservation
	// ends with one PushReserved.
	Reserve(n int) int
	// PushReserved hands claimed deliveries to the stage with the permits
	// Reserve took: each started delivery (at most reserved of them) goes to
	// user code at once on one of those permits, the others are buffered as
	// by Push, and the permits left over are freed. It never blocks.
	PushReserved(ds []*transport.Delivery, reserved int)
	// Free is the number of deliveries the buffer can still take.
	Free() int
	// Buffered is the number of deliveries waiting for a permit.
	Buffered() int
	// InFlight is the number of deliveries being gated, delivered or
	// settled (each holds a permit).
	InFlight() int
	// Counts is Buffered and InFlight read together: a delivery moving
	// from the buffer to a permit is counted once, not in both or neither.
	Counts() (buffered, inflight int)
	// Dispatched counts the deliveries taken from the buffer so far; the
	// watchdog uses it to spot a stage that accepts deliveries but no
	// longer dispatches them.
	Dispatched() int64
	// Fault returns the terminal fault, or nil while the stage is healthy.
	Fault() *transport.Fault
	// ReleaseBuffered hands every buffered (never delivered) delivery back
	// to the broker at once, with no attempt counted.
	ReleaseBuffered(ctx context.Context) error
	// Close stops the stage (see stage.Close). It is idempotent and waits.
	Close(ctx context.Context) error
}

// stageParams is what a listener gives a new stage.
type stageParams struct {
	Source   transport.Source
	Config   Config // with defaults applied
	Out      *outbox
	Context  context.Context // values for every message's context
	Pending  *Pending
	OnChange func() // called, without blocking, when counts change
	// OnRetry is called, without blocking, with the due time of every
	// retry a nack asked the source for (nil: none).
	OnRetry func(at time.Time)
	Logger  watermill.LoggerAdapter
	Name    string // the listener's, for observer events
}

// A stage is the receive stage: a bounded buffer of claimed deliveries, the
// concurrency permits, the lease gate, delivery on the Subscribe channel and
// settlement. Its files: dispatch.go (buffer to message), flight.go (a
// delivered message until it is settled), settle.go (calls to the source),
// renew.go (lease renewal), close.go (closing and handing back).
type stage struct {
	src      transport.Source
	renewer  transport.Renewer        // nil when the source has no leases to renew
	seq      transport.Sequencer      // nil when the source needs no sequenced dispatch
	async    transport.AsyncCompleter // nil when the source acks synchronously only
	txs      transport.TxSettler      // nil when the source cannot settle in a handler's transaction
	cfg      Config
	inPlace  bool // a nack retries in place (Config.RetryInPlace)
	out      *outbox
	base     context.Context
	pending  *Pending
	onChange func()
	onRetry  func(at time.Time)
	logger   watermill.LoggerAdapter
	name     string

	permits chan struct{}
	// settling holds the settle slots: a flight whose message user code has
	// acked or nacked moves from its permit to a slot, when one is free,
	// for the call that settles it (flight.toSlot), so the next delivery
	// does not wait for the broker's round trip. Cap: Concurrency.
	settling chan struct{}
	idle     idleWorkers // lingering workers (work)

	mu      sync.Mutex
	buf     []*transport.Delivery
	holding map[*transport.Delivery]*flight // gated, unsettled (renewed)
	busy    map[string]struct{}             // keys with a delivery taken (seq only)
	closed  bool
	avail   chan struct{} // cap 1: the buffer got an item

	inflight   atomic.Int64
	dispatched atomic.Int64
	fault      atomic.Pointer[transport.Fault]

	// settleCtx is the parent of every call to the source. Close cancels it
	// when it gave up and its grace has passed, so nothing it handed back
	// outlives the grace; a clean Close leaves it (a late Push still
	// releases).
	settleCtx    context.Context
	settleCancel context.CancelFunc
	deadlines    callDeadlines // callCtx's shared deadlines

	stop      chan struct{} // closed by Close or a fault: no new deliveries
	stopOnce  sync.Once
	abandon   chan struct{} // closed when Close gives up waiting
	abandoned atomic.Bool   // set just before abandon is closed
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
	workers   sync.WaitGroup // dispatcher, processes and flights
	renewStop chan struct{}  // closed once every worker has exited
	renewWG   sync.WaitGroup
}

// newStage builds and starts a stage. p.Config must be validated and have
// its defaults applied (NewListener does both).
func newStage(p stageParams) (pipe, error) {
	cfg := p.Config // validated, defaults applied by NewListener
	base := p.Context
	if base == nil {
		base = context.Background()
	}
	logger := p.Logger
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	pending := p.Pending
	if pending == nil {
		pending = NewPending(nil)
	}
	r := &stage{
		src:       p.Source,
		cfg:       cfg,
		inPlace:   cfg.inPlace(),
		out:       p.Out,
		base:      context.WithoutCancel(base),
		pending:   pending,
		onChange:  p.OnChange,
		onRetry:   p.OnRetry,
		logger:    logger,
		name:      p.Name,
		permits:   make(chan struct{}, cfg.Concurrency),
		settling:  make(chan struct{}, cfg.Concurrency),
		holding:   map[*transport.Delivery]*flight{},
		avail:     make(chan struct{}, 1),
		stop:      make(chan struct{}),
		abandon:   make(chan struct{}),
		done:      make(chan struct{}),
		renewStop: make(chan struct{}),
	}
	r.settleCtx, r.settleCancel = context.WithCancel(context.Background())
	if sq, ok := p.Source.(transport.Sequencer); ok {
		r.seq, r.busy = sq, map[string]struct{}{}
	}
	r.async, _ = p.Source.(transport.AsyncCompleter)
	r.txs, _ = p.Source.(transport.TxSettler)
	if rn, ok := p.Source.(transport.Renewer); ok && rn.RenewInterval() > 0 {
		r.renewer = rn
	}
	r.workers.Add(1)
	go r.dispatch()
	if r.renewer != nil {
		r.renewWG.Add(1)
		go r.renew()
	}
	return r, nil
}

// Push implements pipe. Deliveries pushed after the stage stopped are
// released to the broker at once.
func (r *stage) Push(ds []*transport.Delivery) {
	if len(ds) == 0 {
		return
	}
	r.mu.Lock()
	if r.closed || r.isStopped() {
		r.mu.Unlock()
		r.release(ds)
		return
	}
	r.buf = append(r.buf, ds...)
	r.mu.Unlock()
	select {
	case r.avail <- struct{}{}:
	default:
	}
	r.changed()
}

// Reserve implements pipe.
func (r *stage) Reserve(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.isStopped() {
		return 0
	}
	k := 0
	for ; k < n; k++ {
		if len(r.permits)+len(r.buf) >= cap(r.permits) {
			return k // the free permits left are the buffered rows'
		}
		select {
		case r.permits <- struct{}{}:
		default:
			return k
		}
	}
	return k
}

// PushReserved implements pipe. Deliveries handed over after the stage
// stopped are released to the broker at once (started ones included: the
// source undoes their attempt).
func (r *stage) PushReserved(ds []*transport.Delivery, reserved int) {
	started := 0
	for _, d := range ds {
		if d.Started && started < reserved {
			started++
		}
	}
	r.mu.Lock()
	if r.closed || r.isStopped() {
		r.mu.Unlock()
		r.unreserve(reserved)
		r.release(ds)
		return
	}
	// Counted before the lock is let go: Close waits for workers once it
	// has set closed under the same lock.
	r.workers.Add(started)
	r.inflight.Add(int64(started))
	r.dispatched.Add(int64(started))
	r.mu.Unlock()
	r.unreserve(reserved - started)
	if started == 0 {
		r.Push(ds)
		return
	}
	rest := make([]*transport.Delivery, 0, len(ds)-started)
	n := 0
	for _, d := range ds {
		if d.Started && n < started {
			n++
			if r.idle.hand(d) { // a lingering worker's own count stands for d
				r.workers.Done()
			} else {
				go r.work(d)
			}
			continue
		}
		rest = append(rest, d)
	}
	r.changed()
	r.Push(rest)
}

// unreserve frees n permits Reserve took and no delivery used.
func (r *stage) unreserve(n int) {
	for range n {
		<-r.permits
	}
}

// Free implements pipe.
func (r *stage) Free() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0
	}
	return max(r.cfg.BufferSize-len(r.buf), 0)
}

// Buffered implements pipe.
func (r *stage) Buffered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.buf)
}

// InFlight implements pipe.
func (r *stage) InFlight() int { return int(r.inflight.Load()) }

// Counts implements pipe. Deliveries enter the in-flight count under r.mu
// as they leave the buffer (take) or skip it (PushReserved).
func (r *stage) Counts() (buffered, inflight int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.buf), int(r.inflight.Load())
}

// Dispatched implements pipe.
func (r *stage) Dispatched() int64 { return r.dispatched.Load() }

// Fault implements pipe.
func (r *stage) Fault() *transport.Fault { return r.fault.Load() }

// holdingCount returns the deliveries user code holds (gated and not yet
// settled).
func (r *stage) holdingCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.holding)
}

func (r *stage) isStopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// halt closes stop (once) and ends the lingering workers.
func (r *stage) halt() {
	r.stopOnce.Do(func() {
		close(r.stop)
		r.idle.close()
	})
}

func (r *stage) isFaulted() bool { return r.fault.Load() != nil }

func (r *stage) changed() {
	if r.onChange != nil {
		r.onChange()
	}
}

// recordFault marks the stage faulted (first fault wins) and stops it from
// taking new work. It records before it logs: logging may fail too.
func (r *stage) recordFault(stage string, cause error) {
	if r.markFaulted(stage, cause) {
		r.logError("receiver faulted", cause, watermill.LogFields{"stage": stage})
	}
}

// markFaulted records the fault (first one wins), stops the stage and tells
// the listener and the observer, without logging. It reports whether this
// fault was the first.
func (r *stage) markFaulted(stage string, cause error) bool {
	f := &transport.Fault{Stage: stage, Cause: cause, At: time.Now()}
	if !r.fault.CompareAndSwap(nil, f) {
		return false
	}
	r.halt()
	r.changed()
	r.observe(func(o transport.Observer) { o.Faulted(r.name, f) })
	return true
}

// observe calls the observer; a panicking observer is ignored.
func (r *stage) observe(fn func(transport.Observer)) {
	guard.Do(func() { fn(r.cfg.Observer) })
}

// guarded runs fn, turning a panic into a recorded fault and an error.
func (r *stage) guarded(stage string, fn func() error) error {
	var err error
	if p := guard.Call(func() { err = fn() }); p != nil {
		r.recordFault(stage, p)
		return p
	}
	return err
}

// logError and logDebug never let a failing logger take a stage down; a
// panic inside them is recorded as a "log" fault (but not logged again).
func (r *stage) logError(msg string, err error, fields watermill.LogFields) {
	if p := guard.Call(func() { r.logger.Error(msg, err, fields) }); p != nil {
		r.markFaulted("log", p)
	}
}

func (r *stage) logDebug(msg string, fields watermill.LogFields) {
	if p := guard.Call(func() { r.logger.Debug(msg, fields) }); p != nil {
		r.markFaulted("log", p)
	}
}
