package receiver

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/faults"
	"github.com/berth-go/berth/transport"
)

// SettleTimeout bounds each settlement call to the broker (ack, nack,
// release, dead-letter). Settlement never uses a context that closing has
// already cancelled.
const SettleTimeout = 30 * time.Second

// Receiver is the shared receive stage. Build it with New.
type Receiver struct {
	src      transport.Source
	renewer  transport.Renewer // nil when the source has no leases to renew
	cfg      transport.PipelineConfig
	out      chan<- *message.Message
	base     context.Context
	pending  *transport.Pending
	onChange func()
	logger   watermill.LoggerAdapter
	name     string
	obs      transport.Observer

	permits chan struct{}

	mu      sync.Mutex
	buf     []*transport.Delivery
	holding map[*transport.Delivery]*flight // gated, unsettled (renewed)
	closed  bool
	avail   chan struct{} // cap 1: the buffer got an item

	inflight   atomic.Int64
	dispatched atomic.Int64
	fault      atomic.Pointer[transport.Fault]

	stop      chan struct{} // closed by Close or a fault: no new deliveries
	stopOnce  sync.Once
	abandon   chan struct{} // closed when the drain deadline passes
	abandoned atomic.Bool   // set just before abandon is closed
	abandonMu sync.Once
	done      chan struct{}
	closeOnce sync.Once
	workers   sync.WaitGroup // dispatcher and processes
	renewStop chan struct{}  // closed once every worker has exited
	renewWG   sync.WaitGroup
}

var _ transport.Receiver = (*Receiver)(nil)

// New builds and starts a receiver. It is a transport.ReceiverFactory.
func New(p transport.ReceiverParams) (transport.Receiver, error) {
	if p.Source == nil {
		return nil, fmt.Errorf("%w: Source: required", transport.ErrInvalidConfig)
	}
	if p.Out == nil {
		return nil, fmt.Errorf("%w: Out: required", transport.ErrInvalidConfig)
	}
	if err := p.Config.Validate(); err != nil {
		return nil, err
	}
	cfg := p.Config.WithDefaults()
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
		pending = transport.NewPending(nil)
	}
	r := &Receiver{
		src:       p.Source,
		cfg:       cfg,
		out:       p.Out,
		base:      context.WithoutCancel(base),
		pending:   pending,
		onChange:  p.OnChange,
		logger:    logger,
		name:      p.Name,
		obs:       cfg.Observer,
		permits:   make(chan struct{}, cfg.Concurrency),
		holding:   map[*transport.Delivery]*flight{},
		avail:     make(chan struct{}, 1),
		stop:      make(chan struct{}),
		abandon:   make(chan struct{}),
		done:      make(chan struct{}),
		renewStop: make(chan struct{}),
	}
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

// Push implements transport.Receiver. Deliveries pushed after the receiver
// stopped are released to the broker at once.
func (r *Receiver) Push(ds []*transport.Delivery) {
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

// Free implements transport.Receiver.
func (r *Receiver) Free() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0
	}
	return max(r.cfg.BufferSize-len(r.buf), 0)
}

// Buffered implements transport.Receiver.
func (r *Receiver) Buffered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.buf)
}

// InFlight implements transport.Receiver.
func (r *Receiver) InFlight() int { return int(r.inflight.Load()) }

// Dispatched implements transport.Receiver.
func (r *Receiver) Dispatched() int64 { return r.dispatched.Load() }

// Fault implements transport.Receiver.
func (r *Receiver) Fault() *transport.Fault { return r.fault.Load() }

// Done implements transport.Receiver.
func (r *Receiver) Done() <-chan struct{} { return r.done }

// Holding returns the deliveries user code holds (gated and not yet
// settled), for tests and tools.
func (r *Receiver) Holding() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.holding)
}

func (r *Receiver) isStopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

func (r *Receiver) changed() {
	if r.onChange != nil {
		r.onChange()
	}
}

// recordFault marks the receiver faulted (first fault wins) and stops it
// from taking new work. It records before it logs: logging may fail too.
func (r *Receiver) recordFault(stage string, cause error) {
	if r.markFaulted(stage, cause) {
		r.logError("receiver faulted", cause, watermill.LogFields{"stage": stage})
	}
}

// markFaulted records the fault (first one wins), stops the stage and tells
// the listener and the observer, without logging. It reports whether this
// fault was the first.
func (r *Receiver) markFaulted(stage string, cause error) bool {
	f := &transport.Fault{Stage: stage, Cause: cause, At: time.Now()}
	if !r.fault.CompareAndSwap(nil, f) {
		return false
	}
	r.stopOnce.Do(func() { close(r.stop) })
	r.changed()
	r.observe(func(o transport.Observer) { o.Faulted(r.name, f) })
	return true
}

// observe calls the observer; a panicking observer is ignored.
func (r *Receiver) observe(fn func(transport.Observer)) {
	defer func() { _ = recover() }()
	fn(r.obs)
}

// guard runs fn, turning a panic into a recorded fault and an error.
func (r *Receiver) guard(stage string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = panicError(p)
			r.recordFault(stage, err)
		}
	}()
	return fn()
}

func panicError(p any) error {
	if e, ok := p.(error); ok {
		return fmt.Errorf("panic: %w\n%s", e, debug.Stack())
	}
	return fmt.Errorf("panic: %v\n%s", p, debug.Stack())
}

// logError and logDebug never let a failing logger take a stage down; a
// panic inside them is recorded as a fault (but not logged again).
func (r *Receiver) logError(msg string, err error, fields watermill.LogFields) {
	defer func() {
		if p := recover(); p != nil {
			r.markFaulted(string(faults.Log), panicError(p))
		}
	}()
	_ = faults.Hit(faults.Log)
	r.logger.Error(msg, err, fields)
}

func (r *Receiver) logDebug(msg string, fields watermill.LogFields) {
	defer func() {
		if p := recover(); p != nil {
			r.markFaulted(string(faults.Log), panicError(p))
		}
	}()
	r.logger.Debug(msg, fields)
}

func settleCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), SettleTimeout)
}

// release hands deliveries back to the broker untouched.
func (r *Receiver) release(ds []*transport.Delivery) {
	if len(ds) == 0 {
		return
	}
	ctx, cancel := settleCtx()
	defer cancel()
	start := time.Now()
	err := r.guard(string(faults.Release), func() error {
		if err := faults.Hit(faults.Release); err != nil {
			return err
		}
		return r.src.Release(ctx, ds)
	})
	r.settled(transport.SettleRelease, nil, len(ds), start, err)
	if err != nil {
		r.logError("release failed; the broker's lease expiry will return the deliveries", err,
			watermill.LogFields{"count": len(ds)})
	}
}

// dispatch takes a permit, then the oldest buffered delivery, and starts
// processing it.
func (r *Receiver) dispatch() {
	defer r.workers.Done()
	defer func() {
		if p := recover(); p != nil {
			r.recordFault("dispatch", panicError(p))
		}
	}()
	for {
		select {
		case r.permits <- struct{}{}:
		case <-r.stop:
			return
		}
		d := r.take()
		if d == nil {
			<-r.permits
			return
		}
		r.workers.Add(1)
		go r.process(d)
	}
}

// take waits for a buffered delivery; nil means the receiver stopped.
func (r *Receiver) take() *transport.Delivery {
	for {
		r.mu.Lock()
		if r.isStopped() {
			r.mu.Unlock()
			return nil
		}
		if len(r.buf) > 0 {
			d := r.buf[0]
			r.buf[0] = nil
			r.buf = r.buf[1:]
			if len(r.buf) == 0 {
				r.buf = nil // let the backing array go
			}
			r.inflight.Add(1)
			r.dispatched.Add(1)
			r.mu.Unlock()
			r.changed()
			return d
		}
		r.mu.Unlock()
		select {
		case <-r.avail:
		case <-r.stop:
			return nil
		}
	}
}

// process runs one delivery through map, gate, delivery and settlement.
// It holds a permit until the message is settled or enters a batch. A
// message that enters a batch is not watched while the batch holds it: this
// goroutine exits and the flight is picked up again when the batch ends
// (see flight).
func (r *Receiver) process(d *transport.Delivery) {
	var f *flight // owns the permit and the worker count once set
	defer func() {
		if p := recover(); p != nil {
			r.recordFault("process", panicError(p))
			if f != nil && f.state.CompareAndSwap(flightWatched, flightDone) {
				if f.tracker != nil {
					f.tracker.Cancel()
				}
				f.end(transport.OutcomeAbandoned)
			}
		}
		if f == nil {
			r.freePermit()
			r.workers.Done()
		}
	}()

	// Map, then drop the raw payload.
	var msg *message.Message
	err := r.guard(string(faults.Map), func() error {
		if err := faults.Hit(faults.Map); err != nil {
			return err
		}
		var err error
		msg, err = r.src.Map(d)
		return err
	})
	if r.isFaulted() {
		r.release([]*transport.Delivery{d}) // never reached user code
		return
	}
	if err != nil {
		r.deadLetter(d, nil, "cannot map message: "+err.Error())
		return
	}
	d.Raw = nil

	// The lease gate.
	ctx, cancel := settleCtx()
	err = r.src.Begin(ctx, d)
	cancel()
	if err != nil {
		if errors.Is(err, transport.ErrLeaseLost) {
			r.logDebug("lease lost before processing; skipped", watermill.LogFields{"id": d.ID})
		} else {
			r.logError("lease gate failed; the delivery is left to lease recovery", err, watermill.LogFields{"id": d.ID})
		}
		return
	}

	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	msg.Metadata.Set(transport.MetadataAttempt, strconv.Itoa(d.Attempt))
	if d.ID != "" {
		msg.Metadata.Set(transport.MetadataMessageID, d.ID)
	}
	f = &flight{r: r, d: d, msg: msg, wake: make(chan struct{})}
	f.permit.Store(true)
	// Entering a batch frees the permit at once: the message now counts as
	// batch pending, not in flight.
	msgCtx, tracker := transport.NewMessageContext(r.base, r.pending, f)
	f.tracker = tracker
	r.observe(func(o transport.Observer) { msgCtx, f.finish = o.Delivering(msgCtx, r.name, msg) })
	msg.SetContext(msgCtx)

	r.mu.Lock()
	r.holding[d] = f
	r.mu.Unlock()
	wake := f.wake // read before the consumer can see msg

	// Deliver.
	if err := r.guard(string(faults.Deliver), func() error { return faults.Hit(faults.Deliver) }); err != nil {
		f.undelivered()
		return
	}
	select {
	case r.out <- msg:
	case <-r.stop:
		f.undelivered()
		return
	}
	f.watch(wake)
}

// undelivered hands back a flight user code never saw.
func (f *flight) undelivered() {
	f.state.Store(flightDone)
	f.tracker.Cancel()
	f.r.retry(f.d, f.msg, 0)
	f.end(transport.OutcomeAbandoned)
}

// flight states. A flight is watched by exactly one goroutine (or none,
// while a batch holds it); whoever moves it to flightDone settles it.
const (
	flightWatched  int32 = iota // process awaits the ack, nack or abandon
	flightDetached              // a batch holds it: nobody watches
	flightRejoined              // its batch ended: an await goroutine watches
	flightDone                  // settled or handed back
)

// A flight is one delivered message from delivery to settlement. It
// implements transport.BatchHooks: when the message enters a batch, its
// process goroutine exits (a batch may hold a message far longer than a
// permit, and a parked goroutine costs more than the message's metadata);
// when the batch ends, an await goroutine watches for the ack or nack that
// follows. Close hands back detached flights itself. A flight counts in
// Receiver.workers until it ends, so Close waits for it either way.
type flight struct {
	r       *Receiver
	d       *transport.Delivery
	msg     *message.Message
	tracker *transport.Tracker      // its Cancel cancels the message context
	finish  func(transport.Outcome) // the observer's, or nil
	wake    chan struct{}           // closed when the message enters a batch
	state   atomic.Int32
	permit  atomic.Bool // the concurrency permit is still held
	ended   atomic.Bool
}

// watch waits for the message's settlement, or for it to enter a batch
// (wake closed; nil for the await goroutine), and settles it if this
// goroutine still watches it.
func (f *flight) watch(wake <-chan struct{}) {
	r := f.r
	owned := false
	defer func() {
		if p := recover(); p != nil {
			r.recordFault("process", panicError(p))
			if owned {
				f.tracker.Cancel()
				f.end(transport.OutcomeAbandoned)
			}
		}
	}()
	var outcome transport.Outcome
	select {
	case <-f.msg.Acked():
		outcome = transport.OutcomeAcked
	case <-f.msg.Nacked():
		outcome = transport.OutcomeNacked
	case <-r.abandon:
		outcome = transport.OutcomeAbandoned
	case <-wake:
		// Entered a batch. Close may have walked the detached flights
		// before this one detached: hand it back here then.
		f.handBackIfAbandoned(&owned)
		return
	}
	if wake != nil {
		if !f.state.CompareAndSwap(flightWatched, flightDone) {
			// Detached meanwhile: the batch owns it now (Close, if it
			// already walked, left it to us).
			f.handBackIfAbandoned(&owned)
			return
		}
	} else {
		f.state.Store(flightDone) // the await goroutine is the only watcher
	}
	owned = true
	f.tracker.Cancel()
	switch outcome {
	case transport.OutcomeAcked:
		r.complete(f.d, f.msg)
	case transport.OutcomeNacked:
		outcome = r.nack(f.d, f.msg, f.tracker.NackReason())
	default:
		r.logDebug("closing: un-settled message handed back for redelivery", watermill.LogFields{"id": f.d.ID})
		r.retry(f.d, f.msg, 0)
	}
	f.end(outcome)
}

// handBackIfAbandoned hands back a detached flight once Close has given
// up on its messages (setting *owned first, for watch's recovery).
func (f *flight) handBackIfAbandoned(owned *bool) {
	if f.r.abandoned.Load() && f.state.CompareAndSwap(flightDetached, flightDone) {
		*owned = true
		f.handBack()
	}
}

// handBack settles a detached flight the receiver gives up on (Close's
// deadline passed): its context is cancelled, so the batch discards it, and
// it is handed back for redelivery.
func (f *flight) handBack() {
	f.tracker.Cancel()
	f.r.logDebug("closing: batched message handed back for redelivery", watermill.LogFields{"id": f.d.ID})
	f.r.retry(f.d, f.msg, 0)
	f.end(transport.OutcomeAbandoned)
}

// end reports the outcome, forgets the flight and frees what it held. Only
// the goroutine that moved the flight to flightDone calls it; a second call
// (after a panic inside the first) does nothing.
func (f *flight) end(outcome transport.Outcome) {
	if !f.ended.CompareAndSwap(false, true) {
		return
	}
	r := f.r
	if f.finish != nil {
		r.observe(func(transport.Observer) { f.finish(outcome) })
	}
	r.mu.Lock()
	delete(r.holding, f.d)
	r.mu.Unlock()
	f.freePermit()
	r.workers.Done()
}

func (f *flight) freePermit() {
	if f.permit.CompareAndSwap(true, false) {
		f.r.freePermit()
	}
}

// EnteredBatch implements transport.BatchHooks: the permit is freed and the
// process goroutine let go.
func (f *flight) EnteredBatch() {
	f.freePermit()
	if f.state.CompareAndSwap(flightWatched, flightDetached) {
		close(f.wake)
		f.wake = nil // the process goroutine read it before delivering
	}
}

// LeftBatch implements transport.BatchHooks: an await goroutine watches
// for the ack or nack that follows.
func (f *flight) LeftBatch() {
	if f.state.CompareAndSwap(flightDetached, flightRejoined) {
		go f.watch(nil) // counted in workers until f ends
	}
}

// freePermit returns one concurrency permit.
func (r *Receiver) freePermit() {
	r.inflight.Add(-1)
	<-r.permits
	r.changed()
}

// abandonNow tells every watcher to hand its message back.
func (r *Receiver) abandonNow() {
	r.abandoned.Store(true)
	close(r.abandon)
}

// handBackDetached hands back every flight a batch holds; Close calls it
// once its deadline has passed.
func (r *Receiver) handBackDetached() {
	r.mu.Lock()
	var fs []*flight
	for _, f := range r.holding {
		if f.state.Load() == flightDetached {
			fs = append(fs, f)
		}
	}
	r.mu.Unlock()
	for _, f := range fs {
		if f.state.CompareAndSwap(flightDetached, flightDone) {
			f.handBack()
		}
	}
}

func (r *Receiver) isFaulted() bool { return r.fault.Load() != nil }

// settled reports a settlement call to the observer.
func (r *Receiver) settled(op transport.SettleOp, msg *message.Message, n int, start time.Time, err error) {
	r.observe(func(o transport.Observer) { o.Settled(r.name, op, msg, n, start, err) })
}

func (r *Receiver) complete(d *transport.Delivery, msg *message.Message) {
	ctx, cancel := settleCtx()
	defer cancel()
	start := time.Now()
	err := r.guard(string(faults.Ack), func() error {
		if err := faults.Hit(faults.Ack); err != nil {
			return err
		}
		return r.src.Complete(ctx, d)
	})
	r.settled(transport.SettleAck, msg, 1, start, err)
	if err != nil {
		r.logError("ack failed; the message may be redelivered", err, watermill.LogFields{"id": d.ID})
	}
}

// nack retries d, or dead-letters it on its last attempt with why (the
// reason recorded with transport.SetNackReason, or "") after the attempt
// count.
func (r *Receiver) nack(d *transport.Delivery, msg *message.Message, why string) transport.Outcome {
	if r.cfg.MaxAttempts > 0 && d.Attempt >= r.cfg.MaxAttempts {
		reason := fmt.Sprintf("nacked on attempt %d of %d (MaxAttempts)", d.Attempt, r.cfg.MaxAttempts)
		if why != "" {
			reason += ": " + why
		}
		r.deadLetter(d, msg, reason)
		return transport.OutcomeDeadLettered
	}
	r.retry(d, msg, r.cfg.RetryDelayFor(d.Attempt))
	return transport.OutcomeNacked
}

func (r *Receiver) retry(d *transport.Delivery, msg *message.Message, delay time.Duration) {
	ctx, cancel := settleCtx()
	defer cancel()
	start := time.Now()
	err := r.guard(string(faults.Nack), func() error {
		if err := faults.Hit(faults.Nack); err != nil {
			return err
		}
		return r.src.Retry(ctx, d, delay)
	})
	r.settled(transport.SettleNack, msg, 1, start, err)
	if err != nil {
		r.logError("nack failed; the message returns after its lease expires", err, watermill.LogFields{"id": d.ID})
	}
}

func (r *Receiver) deadLetter(d *transport.Delivery, msg *message.Message, reason string) {
	ctx, cancel := settleCtx()
	defer cancel()
	start := time.Now()
	err := r.guard(string(faults.DeadLetter), func() error {
		if err := faults.Hit(faults.DeadLetter); err != nil {
			return err
		}
		return r.src.DeadLetter(ctx, d, msg, reason)
	})
	r.settled(transport.SettleDeadLetter, msg, 1, start, err)
	if err != nil {
		r.logError("dead-letter failed; the message returns after its lease expires", err,
			watermill.LogFields{"id": d.ID, "reason": reason})
		return
	}
	r.observe(func(o transport.Observer) { o.DeadLettered(r.name, msg, reason) })
}

// renew extends the leases of every held delivery once per interval.
func (r *Receiver) renew() {
	defer r.renewWG.Done()
	defer func() {
		if p := recover(); p != nil {
			r.recordFault("renew", panicError(p))
		}
	}()
	t := time.NewTicker(r.renewer.RenewInterval())
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-r.renewStop:
			return
		}
		r.mu.Lock()
		ds := make([]*transport.Delivery, 0, len(r.holding))
		for d := range r.holding {
			ds = append(ds, d)
		}
		r.mu.Unlock()
		if len(ds) == 0 {
			continue
		}
		ctx, cancel := settleCtx()
		err := r.renewer.Renew(ctx, ds)
		cancel()
		if err != nil {
			r.logError("lease renewal failed", err, watermill.LogFields{"count": len(ds)})
		}
	}
}

// ReleaseBuffered implements transport.Receiver.
func (r *Receiver) ReleaseBuffered(ctx context.Context) error {
	r.mu.Lock()
	ds := r.buf
	r.buf = nil
	r.mu.Unlock()
	if len(ds) == 0 {
		return nil
	}
	r.changed()
	r.release(ds)
	return ctx.Err()
}

// Close implements transport.Receiver. Buffered deliveries are released at
// once; in-flight ones may be settled until ctx is done, then they are
// handed back for redelivery.
func (r *Receiver) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.stopOnce.Do(func() { close(r.stop) })
		_ = r.ReleaseBuffered(ctx)

		drained := make(chan struct{})
		go func() {
			r.workers.Wait()
			close(drained)
		}()
		select {
		case <-drained:
		case <-ctx.Done():
			r.abandonMu.Do(r.abandonNow)
			r.handBackDetached()
			<-drained
		}
		r.abandonMu.Do(r.abandonNow)
		close(r.renewStop)
		r.renewWG.Wait()
		close(r.done)
		r.changed()
	})
	<-r.done
	return nil
}
