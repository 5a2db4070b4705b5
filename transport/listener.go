package transport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/benchmode"
	"github.com/berth-go/berth/internal/faults"
	"github.com/berth-go/berth/wave"
)

// ClaimSizer is implemented by sources whose Claim returns at most a fixed
// number of deliveries per call (SQS: 10). The receive loop then launches a
// wave of concurrent Claims, one per probe. Sources without it (SQL) claim a
// whole wave in one call, each row counting as a probe.
type ClaimSizer interface {
	MaxClaim() int
}

// ListenerConfig is what NewListener needs.
type ListenerConfig struct {
	// Name identifies the listener (topic, and consumer group if any).
	Name string
	// Destination is what the listener consumes, for observers and
	// ListenerState. Its Name defaults to Name.
	Destination Destination
	// Source to receive from. The listener does not close it.
	Source Source
	// Pipeline configuration; defaults applied by NewListener.
	Pipeline PipelineConfig
	// NewReceiver builds the receiver stage, on Start and on every rebuild.
	NewReceiver ReceiverFactory
	// Context carries values into every message's context (its
	// cancellation is ignored; use Close).
	Context context.Context
	// Logger; nil discards.
	Logger watermill.LoggerAdapter
}

// A Listener runs one receive loop over one source: it claims waves of
// deliveries sized by the wave controller, hands them to its receiver
// stage, applies back-pressure on QueueCount, and watches its receiver:
// a faulted receiver is disposed of and rebuilt. It owns the Watermill
// channel that Messages returns.
type Listener struct {
	cfg         ListenerConfig
	pcfg        PipelineConfig
	logger      watermill.LoggerAdapter
	out         chan *message.Message
	pending     *Pending
	claimSize   int
	wakeCh      <-chan struct{}
	hinter      WakeHinter
	loopKick    chan struct{}
	checkKick   chan struct{}
	stopCh      chan struct{}
	started     atomic.Bool
	startOnce   sync.Once
	closeOnce   sync.Once
	closed      chan struct{}
	goroutines  sync.WaitGroup
	disposals   sync.WaitGroup
	startedAt   time.Time
	rebuilds    atomic.Int64
	waveSize    atomic.Int64
	loopState   atomic.Int32
	failures    atomic.Int64
	queueGone   atomic.Bool
	lastReceive atomic.Int64 // unix nanos
	loopFault   atomic.Pointer[Fault]

	mu        sync.Mutex
	recv      Receiver
	paused    bool
	latched   bool
	lastErr   string
	lastFault *Fault // kept after a rebuild for reporting
}

// NewListener validates cfg and returns a stopped listener.
func NewListener(cfg ListenerConfig) (*Listener, error) {
	var errs []error
	if cfg.Source == nil {
		errs = append(errs, errors.New("Source: required"))
	}
	if cfg.NewReceiver == nil {
		errs = append(errs, errors.New("NewReceiver: required"))
	}
	if err := cfg.Pipeline.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	if cfg.Context == nil {
		cfg.Context = context.Background()
	}
	if cfg.Destination.Name == "" {
		cfg.Destination.Name = cfg.Name
	}
	l := &Listener{
		cfg:       cfg,
		pcfg:      cfg.Pipeline.WithDefaults(),
		logger:    cfg.Logger,
		out:       make(chan *message.Message),
		claimSize: 0,
		loopKick:  make(chan struct{}, 1),
		checkKick: make(chan struct{}, 1),
		stopCh:    make(chan struct{}),
		closed:    make(chan struct{}),
	}
	if l.logger == nil {
		l.logger = watermill.NopLogger{}
	}
	l.pcfg.Observer = bindObserver(l.pcfg.Observer, cfg.Name, cfg.Destination)
	l.pending = NewPending(l.kick)
	if cs, ok := cfg.Source.(ClaimSizer); ok && cs.MaxClaim() > 0 {
		l.claimSize = cs.MaxClaim()
	}
	if w, ok := cfg.Source.(Waker); ok {
		l.wakeCh = w.Wake()
	}
	if h, ok := cfg.Source.(WakeHinter); ok {
		l.hinter = h
	}
	return l, nil
}

// bindObserver returns the observer a ListenerObserver binds to one
// listener, or obs itself.
func bindObserver(obs Observer, name string, d Destination) (bound Observer) {
	bound = obs
	lo, ok := obs.(ListenerObserver)
	if !ok {
		return bound
	}
	defer func() { _ = recover() }() // a panicking observer is ignored
	if b := lo.ForListener(name, d); b != nil {
		bound = b
	}
	return bound
}

// Messages returns the Watermill channel; it is closed by Close.
func (l *Listener) Messages() <-chan *message.Message { return l.out }

// Name returns the listener's name.
func (l *Listener) Name() string { return l.cfg.Name }

// Destination returns what the listener consumes.
func (l *Listener) Destination() Destination { return l.cfg.Destination }

// Pending returns the listener's batching-pending counter.
func (l *Listener) Pending() *Pending { return l.pending }

func (l *Listener) kick() {
	select {
	case l.loopKick <- struct{}{}:
	default:
	}
	select {
	case l.checkKick <- struct{}{}:
	default:
	}
}

// Start builds the receiver and starts the receive loop and the watchdog.
// Starting a listener whose receiver has faulted disposes of that receiver
// and builds a new one. Start after Close returns ErrClosed.
func (l *Listener) Start() error {
	select {
	case <-l.closed:
		return ErrClosed
	default:
	}
	var err error
	l.startOnce.Do(func() {
		l.startedAt = time.Now()
		if err = l.replaceReceiver(false); err != nil {
			return
		}
		l.started.Store(true)
		l.loopState.Store(int32(LoopRunning))
		l.goroutines.Add(2)
		go l.loop()
		go l.watchdog()
	})
	if err != nil {
		return err
	}
	if l.HasFaulted() {
		return l.replaceReceiver(true)
	}
	return nil
}

// replaceReceiver disposes of the current receiver (if any) in the
// background and installs a new one.
func (l *Listener) replaceReceiver(rebuild bool) error {
	nr, err := l.cfg.NewReceiver(ReceiverParams{
		Source:   l.cfg.Source,
		Config:   l.pcfg,
		Out:      l.out,
		Context:  l.cfg.Context,
		Pending:  l.pending,
		OnChange: l.kick,
		Logger:   l.logger,
		Name:     l.cfg.Name,
	})
	if err != nil {
		return fmt.Errorf("berth: building receiver: %w", err)
	}
	l.mu.Lock()
	select {
	case <-l.stopCh:
		l.mu.Unlock()
		_ = nr.Close(context.Background())
		return ErrClosed
	default:
	}
	old := l.recv
	if old != nil {
		if f := old.Fault(); f != nil {
			l.lastFault = f
		}
	}
	if f := l.loopFault.Swap(nil); f != nil {
		l.lastFault = f
	}
	l.recv = nr
	l.mu.Unlock()
	if rebuild {
		l.rebuilds.Add(1)
		l.observe(func(o Observer) { o.Rebuilt(l.cfg.Name) })
	}
	if old != nil {
		l.disposals.Add(1)
		go func() {
			defer l.disposals.Done()
			ctx, cancel := context.WithTimeout(context.Background(), l.pcfg.DrainTimeout)
			defer cancel()
			_ = old.Close(ctx)
		}()
	}
	l.kick()
	return nil
}

// Rebuild disposes of the current receiver and builds a new one, whatever
// its state. The watchdog calls it for faulted receivers.
func (l *Listener) Rebuild() error {
	if !l.started.Load() {
		return errors.New("berth: listener not started")
	}
	return l.replaceReceiver(true)
}

// Pause stops fetching and releases every prefetched delivery back to the
// broker. The listener stays paused, whatever back-pressure or the watchdog
// do, until Resume.
func (l *Listener) Pause(ctx context.Context) error {
	l.mu.Lock()
	l.paused = true
	r := l.recv
	l.mu.Unlock()
	l.kick()
	if r != nil {
		return r.ReleaseBuffered(ctx)
	}
	return nil
}

// Resume undoes Pause.
func (l *Listener) Resume() {
	l.mu.Lock()
	l.paused = false
	l.mu.Unlock()
	l.kick()
}

// QueueCount is the number of messages the listener holds: buffered, in
// flight, and pending in batching stages.
func (l *Listener) QueueCount() int {
	l.mu.Lock()
	r := l.recv
	l.mu.Unlock()
	n := l.batchPending()
	if r != nil {
		n += r.Buffered() + r.InFlight()
	}
	return n
}

// batchPending is the pending count as QueueCount sees it.
func (l *Listener) batchPending() int {
	if benchmode.IgnoreBatchPending.Load() {
		return 0
	}
	return l.pending.Load()
}

// Status returns the listener's status.
func (l *Listener) Status() Status { return l.State().Status }

// HasFaulted reports whether the current receiver has faulted and not yet
// been rebuilt.
func (l *Listener) HasFaulted() bool {
	return l.currentFault() != nil
}

// currentFault returns the fault of the current receiver or of the receive
// loop, or nil.
func (l *Listener) currentFault() *Fault {
	if f := l.loopFault.Load(); f != nil {
		return f
	}
	l.mu.Lock()
	r := l.recv
	l.mu.Unlock()
	if r != nil {
		return r.Fault()
	}
	return nil
}

// safeLog runs a logging call; a logger that panics must not take the
// caller down with it.
func (l *Listener) safeLog(fn func()) {
	defer func() { _ = recover() }()
	fn()
}

// State returns a snapshot of the listener.
func (l *Listener) State() ListenerState {
	l.mu.Lock()
	r := l.recv
	s := ListenerState{
		Name:        l.cfg.Name,
		Destination: l.cfg.Destination,
		Latched:     l.latched,
		LastError:   l.lastErr,
		StartedAt:   l.startedAt,
	}
	paused := l.paused
	lastFault := l.lastFault
	l.mu.Unlock()
	if r != nil {
		s.Buffered = r.Buffered()
		s.InFlight = r.InFlight()
	}
	s.BatchPending = l.pending.Load()
	s.QueueCount = s.Buffered + s.InFlight + l.batchPending()
	s.Rebuilds = l.rebuilds.Load()
	s.Wave = int(l.waveSize.Load())
	s.ConsecutiveFailures = int(l.failures.Load())
	s.QueueMissing = l.queueGone.Load()
	if ns := l.lastReceive.Load(); ns != 0 {
		s.LastReceive = time.Unix(0, ns)
	}
	s.Loop = LoopState(l.loopState.Load())
	f := l.loopFault.Load()
	if f == nil && r != nil {
		f = r.Fault()
	}
	if f == nil {
		f = lastFault
	} else {
		s.Faulted = true
	}
	if f != nil {
		s.Fault = f.Error()
		s.FaultAt = f.At
	}
	select {
	case <-l.closed:
		s.Status = StatusStopped
		s.Loop = LoopStopped
		return s
	default:
	}
	switch {
	case !l.started.Load():
		s.Status = StatusStopped
	case s.Faulted:
		s.Status = StatusFaulted
		s.Loop = LoopFaulted
	case paused:
		s.Status = StatusPaused
	case s.Latched:
		s.Status = StatusTooBusy
	default:
		s.Status = StatusAccepting
	}
	return s
}

// evaluate applies back-pressure and reports whether the loop may fetch.
func (l *Listener) evaluate() (Receiver, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.recv
	if r == nil || r.Fault() != nil || l.loopFault.Load() != nil {
		return r, false
	}
	n := l.batchPending() + r.Buffered() + r.InFlight()
	if !l.latched && n > l.pcfg.MaxQueue {
		l.latched = true
	} else if l.latched && n <= l.pcfg.RestartQueue {
		l.latched = false
	}
	return r, !l.paused && !l.latched
}

func (l *Listener) stopping() bool {
	select {
	case <-l.stopCh:
		return true
	default:
		return false
	}
}

// wait blocks until d passes, a kick (a count or state change), or stop.
// It reports false on stop.
func (l *Listener) wait(d time.Duration) bool {
	select {
	case <-l.pcfg.Clock.After(d):
	case <-l.loopKick:
	case <-l.stopCh:
		return false
	}
	return true
}

// loop is the receive loop.
func (l *Listener) loop() {
	defer l.goroutines.Done()
	defer func() {
		if p := recover(); p != nil {
			// The loop must not die silently: record the fault first (the
			// listener reports faulted and stops fetching until the watchdog
			// rebuilds), then restart the loop, then try to log.
			f := &Fault{Stage: "receive", Cause: fmt.Errorf("panic: %v", p), At: time.Now()}
			if l.loopFault.CompareAndSwap(nil, f) {
				l.observe(func(o Observer) { o.Faulted(l.cfg.Name, f) })
			}
			l.kick()
			if !l.stopping() {
				l.goroutines.Add(1)
				go l.loop()
			}
			l.safeLog(func() {
				l.logger.Error("receive loop panicked; restarted, waiting for the watchdog", fmt.Errorf("%v\n%s", p, debug.Stack()), nil)
			})
		}
	}()
	ctrl, err := wave.New(l.pcfg.Wave, clockAdapter{l.pcfg.Clock})
	if err != nil { // validated already
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	errDelay := time.Duration(0)
	var (
		woken   bool          // this wave answers a wake-up
		holdoff time.Duration // how long to sit on the next wake-up
	)
	for !l.stopping() {
		r, ok := l.evaluate()
		if !ok {
			if !l.wait(l.pcfg.CheckInterval) {
				return
			}
			continue
		}
		free := r.Free()
		if l.claimSize > 0 && free < l.claimSize && r.Buffered() >= l.claimSize {
			// A partial request would cost as much as a full one; the
			// buffer has work enough until a full request fits.
			free = 0
		}
		n := ctrl.Next(free)
		if n == 0 {
			if !l.wait(l.pcfg.CheckInterval) {
				return
			}
			continue
		}
		l.waveSize.Store(int64(n))
		launched, found, claimed, err := l.claimWave(ctx, r, n, free)
		l.observe(func(o Observer) { o.WaveDone(l.cfg.Name, launched, found, claimed, err) })
		if err != nil {
			if l.stopping() {
				return
			}
			l.failures.Add(1)
			l.queueGone.Store(errors.Is(err, ErrQueueNotFound))
			l.mu.Lock()
			l.lastErr = err.Error()
			l.mu.Unlock()
			errDelay = nextErrorDelay(errDelay, l.pcfg.ErrorBackoff, l.pcfg.MaxErrorDelay)
			l.loopState.Store(int32(LoopBackingOff))
			l.safeLog(func() {
				l.logger.Error("receive failed; backing off", err, watermill.LogFields{"listener": l.cfg.Name, "delay": errDelay})
			})
			ctrl.Reset()
			if !l.wait(errDelay) {
				return
			}
			continue
		}
		errDelay = 0
		l.failures.Store(0)
		l.queueGone.Store(false)
		l.lastReceive.Store(time.Now().UnixNano())
		l.loopState.Store(int32(LoopRunning))
		if woken {
			// Adapt to the wake-ups this loop loses: when many instances
			// hear the same wake-up, the ones whose claims keep coming back
			// empty answer later and later (up to the empty delay), so the
			// winners take the batch and the losers stop spending claims.
			if found == 0 {
				holdoff = min(max(2*holdoff, wakeHoldoffBase), max(l.pcfg.Wave.EmptyDelay, wakeHoldoffBase))
			} else if holdoff /= 2; holdoff < wakeHoldoffBase {
				// Winning a race shortens the holdoff gradually, so an
				// instance that wins now and then does not rejoin every race.
				holdoff = 0
			}
			woken = false
		}
		if delay := ctrl.Observe(launched, found); delay > 0 {
			ok, w := l.waitEmpty(delay, holdoff)
			if !ok {
				return
			}
			woken = w
			if w && l.hinter != nil {
				ctrl.Hint(l.hinter.TakeWakeHint())
			}
		}
	}
}

// wakeHoldoffBase is the first delay before answering a wake-up after one
// whose claim came back empty.
const wakeHoldoffBase = 5 * time.Millisecond

// waitEmpty waits out the empty delay after an empty wave. It returns early
// on a wake-up from the source (after holdoff, jittered) and reports whether
// it was woken; counting changes (acks) do not end it. It reports false on
// stop.
func (l *Listener) waitEmpty(d, holdoff time.Duration) (ok, woken bool) {
	timer := l.pcfg.Clock.After(d)
	select {
	case <-timer:
		return true, false
	case <-l.wakeCh:
	case <-l.stopCh:
		return false, false
	}
	// Answer after a jittered delay: instances that all heard the same
	// wake-up then claim one after another instead of splitting the rows
	// between simultaneous claims, so the first takes the batch and the
	// others learn to hold off.
	d = rand.N(wakeHoldoffBase)
	if holdoff > 0 {
		d = holdoff/2 + rand.N(holdoff/2+1)
	}
	select {
	case <-l.pcfg.Clock.After(d):
	case <-l.stopCh:
		return false, false
	}
	return true, true
}

// claimWave launches one wave of n probes and pushes what they claim.
func (l *Listener) claimWave(ctx context.Context, r Receiver, n, free int) (launched, found, claimed int, err error) {
	if err := faults.Hit(faults.Receive); err != nil {
		return 0, 0, 0, err
	}
	if l.claimSize == 0 {
		ds, err := l.claim(ctx, n)
		if err != nil {
			return n, 0, 0, err
		}
		r.Push(ds)
		return n, len(ds), len(ds), nil
	}
	// One Claim per probe, run concurrently, each pushed as it returns. Ask
	// in full-size requests only: no more probes than full requests fit in
	// the free space (one smaller request when not even one fits).
	n = min(n, max(1, free/l.claimSize))
	per := min(l.claimSize, free)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
		hits   int
		budget = free
	)
	for i := 0; i < n && budget > 0; i++ {
		m := min(per, budget)
		budget -= m
		launched++
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds, err := l.claim(ctx, m)
			if len(ds) > 0 {
				l.pushCurrent(ds)
			}
			mu.Lock()
			defer mu.Unlock()
			claimed += len(ds)
			if err != nil {
				errs = append(errs, err)
			} else if len(ds) >= m {
				hits++ // a probe finds its message when the call comes back full
			}
		}()
	}
	wg.Wait()
	if claimed == 0 && len(errs) > 0 {
		return launched, 0, claimed, errors.Join(errs...)
	}
	return launched, hits, claimed, nil
}

// claim makes one Claim call on the source and reports it to the observer,
// unless the listener's own stop cut it short.
func (l *Listener) claim(ctx context.Context, max int) ([]*Delivery, error) {
	start := time.Now()
	ds, err := l.cfg.Source.Claim(ctx, max)
	if err == nil || !l.stopping() {
		l.observe(func(o Observer) { o.Received(l.cfg.Name, start, len(ds), err) })
	}
	return ds, err
}

// observe calls the observer; a panicking observer is ignored.
func (l *Listener) observe(fn func(Observer)) {
	defer func() { _ = recover() }()
	fn(l.pcfg.Observer)
}

// pushCurrent pushes to the receiver installed now (which releases them if
// it has stopped).
func (l *Listener) pushCurrent(ds []*Delivery) {
	l.mu.Lock()
	r := l.recv
	l.mu.Unlock()
	r.Push(ds)
}

func nextErrorDelay(prev, base, ceiling time.Duration) time.Duration {
	d := base
	if prev > 0 {
		d = prev * 2
	}
	d = min(d, ceiling)
	// Full jitter on the upper half: [d/2, d].
	if d > 1 {
		d = d/2 + rand.N(d/2+1)
	}
	return d
}

// watchdog applies back-pressure promptly and rebuilds a faulted receiver,
// whatever the listener's status; a paused listener stays paused.
func (l *Listener) watchdog() {
	defer l.goroutines.Done()
	t := time.NewTicker(l.pcfg.CheckInterval)
	defer t.Stop()
	var rebuild <-chan time.Time // armed when a fault is first seen
	var stall stallDetector
	for {
		select {
		case <-t.C:
			l.checkStall(&stall)
		case <-l.checkKick:
		case <-rebuild:
			rebuild = nil
			l.rebuildFaulted()
			continue
		case <-l.stopCh:
			return
		}
		l.check()
		if rebuild == nil && l.HasFaulted() {
			// Rebuild half a check interval after the fault is seen: soon,
			// yet long enough for health to report it, and never in a spin.
			rebuild = time.After(l.pcfg.CheckInterval / 2)
		}
	}
}

// StallChecks is how many consecutive watchdog ticks a receiver may hold
// buffered deliveries with free permits without dispatching any before the
// watchdog declares it stalled (faulted) and rebuilds it: a stage that
// accepts deliveries but no longer hands them on is a zombie.
const StallChecks = 8

type stallDetector struct {
	recv       Receiver
	dispatched int64
	ticks      int
}

// checkStall records a stall fault when the receiver has had buffered
// deliveries and free permits for StallChecks ticks without dispatching.
func (l *Listener) checkStall(s *stallDetector) {
	l.mu.Lock()
	r := l.recv
	l.mu.Unlock()
	if r == nil || r.Fault() != nil {
		s.ticks = 0
		return
	}
	d := r.Dispatched()
	stuck := r.Buffered() > 0 && r.InFlight() < l.pcfg.Concurrency && d == s.dispatched && r == s.recv
	s.recv, s.dispatched = r, d
	if !stuck {
		s.ticks = 0
		return
	}
	s.ticks++
	if s.ticks >= StallChecks {
		s.ticks = 0
		f := &Fault{Stage: "dispatch", Cause: errors.New("stalled: buffered deliveries and free permits, nothing dispatched"), At: time.Now()}
		if l.loopFault.CompareAndSwap(nil, f) {
			l.observe(func(o Observer) { o.Faulted(l.cfg.Name, f) })
			l.kick()
		}
	}
}

// check applies back-pressure.
func (l *Listener) check() {
	defer func() {
		if p := recover(); p != nil {
			l.safeLog(func() { l.logger.Error("watchdog check panicked", fmt.Errorf("%v", p), nil) })
		}
	}()
	wasLatched := l.isLatched()
	l.evaluate()
	if l.isLatched() != wasLatched {
		select {
		case l.loopKick <- struct{}{}:
		default:
		}
	}
}

// rebuildFaulted replaces a faulted receiver, whatever the listener's
// status; a paused listener stays paused.
func (l *Listener) rebuildFaulted() {
	defer func() {
		if p := recover(); p != nil {
			l.safeLog(func() { l.logger.Error("watchdog rebuild panicked", fmt.Errorf("%v", p), nil) })
		}
	}()
	if !l.HasFaulted() || l.stopping() {
		return
	}
	if err := l.replaceReceiver(true); err != nil && !errors.Is(err, ErrClosed) {
		l.safeLog(func() { l.logger.Error("rebuilding faulted receiver failed; will retry", err, nil) })
	}
}

func (l *Listener) isLatched() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.latched
}

// Close stops the loop and the watchdog, closes the receiver (buffered
// deliveries released at once, in-flight ones drained until ctx is done),
// and closes the Messages channel. It is idempotent and waits.
func (l *Listener) Close(ctx context.Context) error {
	l.closeOnce.Do(func() {
		close(l.stopCh)
		l.goroutines.Wait()
		l.mu.Lock()
		r := l.recv
		l.mu.Unlock()
		if r != nil {
			_ = r.Close(ctx)
		}
		l.disposals.Wait()
		close(l.out)
		close(l.closed)
	})
	<-l.closed
	return nil
}

// Closed is closed when Close has finished.
func (l *Listener) Closed() <-chan struct{} { return l.closed }

type clockAdapter struct{ c Clock }

func (a clockAdapter) Now() time.Time { return a.c.Now() }
