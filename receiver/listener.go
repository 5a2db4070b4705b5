package receiver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/due"
	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/internal/subopt"
	"github.com/berth-go/berth/internal/wait"
	"github.com/berth-go/berth/transport"
)

// ListenerConfig is what NewListener needs.
type ListenerConfig struct {
	// Name identifies the listener (topic, and consumer group if any).
	Name string
	// Destination is what the listener consumes, for observers and
	// ListenerState. Its Name defaults to Name.
	Destination transport.Destination
	// Source to receive from. The listener does not close it.
	Source transport.Source
	// Pipeline configuration; defaults applied by NewListener.
	Pipeline Config
	// Context carries values into every message's context (its
	// cancellation is ignored; use Close).
	Context context.Context
	// Logger; nil discards.
	Logger watermill.LoggerAdapter
}

// A Listener runs one receive loop over one source: it claims waves of
// deliveries sized by the wave controller (loop.go), hands them to its
// stage (stage.go), applies back-pressure on QueueCount (backpressure.go),
// and watches its stage: a faulted or stalled stage is disposed of and
// rebuilt (watchdog.go). It owns the Watermill channel that Messages
// returns.
type Listener struct {
	cfg       ListenerConfig
	pcfg      Config
	logger    watermill.LoggerAdapter
	newPipe   func(stageParams) (pipe, error) // newStage; tests substitute
	out       *outbox
	pending   *Pending
	claimSize int
	direct    transport.DirectClaimer // nil: the source has no direct claims
	wakeCh    <-chan struct{}
	kickCh    <-chan struct{} // transport.Kicker: claim again at once, no hold-off
	hinter    transport.WakeHinter
	loopKick  chan struct{}
	checkKick chan struct{}
	// retryDues are the due times of the retries this listener's stages
	// issued (nacks with a delay): the loop's empty wait ends when the
	// earliest falls due (loop.go, waitEmpty). dueKick (cap 1) tells a
	// waiting loop that an earlier one was recorded.
	retryDues due.Set
	dueKick   chan struct{}
	stopCh    chan struct{}
	// ignorePending leaves batch-pending messages out of QueueCount
	// (subopt.Options.IgnoreBatchPending; benchmarks only).
	ignorePending bool

	started    atomic.Bool
	startOnce  sync.Once
	closeOnce  sync.Once
	closeErr   error
	closed     chan struct{}
	goroutines sync.WaitGroup // the loop, the watchdog and the contact check
	disposals  sync.WaitGroup // stages being closed after a rebuild
	startedAt  time.Time

	rebuilds    atomic.Int64
	waveSize    atomic.Int64
	loopState   atomic.Int32
	failures    atomic.Int64
	queueGone   atomic.Bool
	lastReceive atomic.Int64 // unix nanos
	contact     contactState
	contactAt   atomic.Int64 // when the broker last answered (contact.go)
	contactFail atomic.Int64 // when a call last failed
	pingFail    atomic.Int64 // when a ping last failed
	claimSince  atomic.Int64 // when the Claim under way began; 0: none
	pingSince   atomic.Int64 // when the ping under way began; 0: none
	loopFault   atomic.Pointer[transport.Fault]

	// pauseMu orders Pause against the loop handing claimed rows to the
	// stage (handOver): the loop holds it for reading from its check of
	// paused to its push, Pause for writing while it sets paused. So rows
	// a claim returns are either in the stage before Pause sets paused
	// (then its ReleaseBuffered releases those still buffered) or handed
	// back by the loop, never buffered after Pause released the buffer.
	pauseMu sync.RWMutex

	mu        sync.Mutex
	recv      pipe
	paused    bool
	latched   bool
	lastErr   string
	lastFault *transport.Fault // kept after a rebuild for reporting
}

// NewListener validates cfg and returns a stopped listener.
func NewListener(cfg ListenerConfig) (*Listener, error) {
	var errs []error
	if cfg.Source == nil {
		errs = append(errs, errors.New("Source: required"))
	}
	if err := cfg.Pipeline.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", transport.ErrInvalidConfig, errors.Join(errs...))
	}
	if cfg.Context == nil {
		cfg.Context = context.Background()
	}
	if cfg.Destination.Name == "" {
		cfg.Destination.Name = cfg.Name
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	opts := subopt.From(cfg.Context)
	if opts.WrapLogger != nil {
		cfg.Logger = opts.WrapLogger(cfg.Logger)
	}
	l := &Listener{
		cfg:           cfg,
		pcfg:          cfg.Pipeline.WithDefaults(),
		logger:        cfg.Logger,
		newPipe:       newStage,
		out:           newOutbox(),
		loopKick:      make(chan struct{}, 1),
		dueKick:       make(chan struct{}, 1),
		checkKick:     make(chan struct{}, 1),
		stopCh:        make(chan struct{}),
		closed:        make(chan struct{}),
		ignorePending: opts.IgnoreBatchPending,
	}
	l.pcfg.Observer = bindObserver(l.pcfg.Observer, cfg.Name, cfg.Destination)
	l.pending = NewPending(l.kick)
	if cs, ok := cfg.Source.(transport.ClaimSizer); ok && cs.MaxClaim() > 0 {
		l.claimSize = cs.MaxClaim()
	}
	if dc, ok := cfg.Source.(transport.DirectClaimer); ok && l.claimSize == 0 && !isSequencer(cfg.Source) {
		l.direct = dc
	}
	l.contact.reporter, _ = cfg.Source.(transport.ContactReporter)
	l.contact.pinger, _ = cfg.Source.(transport.Pinger)
	if lp, ok := cfg.Source.(transport.LongPoller); ok {
		guard.Do(func() { l.contact.wait = lp.ClaimWait() })
	}
	if w, ok := cfg.Source.(transport.Waker); ok {
		l.wakeCh = w.Wake()
	}
	if k, ok := cfg.Source.(transport.Kicker); ok {
		l.kickCh = k.Kick()
	}
	if h, ok := cfg.Source.(transport.WakeHinter); ok {
		l.hinter = h
	}
	return l, nil
}

// bindObserver returns the observer a ListenerObserver binds to one
// listener, or obs itself (also when binding panics).
func bindObserver(obs transport.Observer, name string, d transport.Destination) transport.Observer {
	bound := obs
	if lo, ok := obs.(transport.ListenerObserver); ok {
		guard.Do(func() {
			if b := lo.ForListener(name, d); b != nil {
				bound = b
			}
		})
	}
	return bound
}

// Messages returns the Watermill channel; it is closed by Close.
func (l *Listener) Messages() <-chan *message.Message { return l.out.ch }

// Name returns the listener's name.
func (l *Listener) Name() string { return l.cfg.Name }

// Destination returns what the listener consumes.
func (l *Listener) Destination() transport.Destination { return l.cfg.Destination }

// kick tells the loop and the watchdog that counts or state changed.
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

// Start builds the stage and starts the receive loop and the watchdog.
// Starting a listener whose stage has faulted disposes of that stage and
// builds a new one. Start after Close returns transport.ErrClosed.
func (l *Listener) Start() error {
	select {
	case <-l.closed:
		return transport.ErrClosed
	default:
	}
	var err error
	first := false
	l.startOnce.Do(func() {
		first = true
		l.startedAt = time.Now()
		if err = l.replaceStage(false); err != nil {
			return
		}
		l.started.Store(true)
		l.loopState.Store(int32(transport.LoopRunning))
		l.goroutines.Add(2)
		go l.loop()
		go l.watchdog()
		if l.contact.pinger != nil && l.pcfg.ContactInterval > 0 {
			l.goroutines.Add(1)
			go l.contactLoop()
		}
	})
	if err != nil {
		return err
	}
	// Only a later Start rebuilds: the loop just started may already have
	// faulted (its first claim), and that fault must stay visible until the
	// watchdog rebuilds, as any other.
	if !first && l.HasFaulted() {
		return l.replaceStage(true)
	}
	return nil
}

// replaceStage disposes of the current stage (if any) in the background and
// installs a new one.
func (l *Listener) replaceStage(rebuild bool) error {
	nr, err := l.newPipe(stageParams{
		Source:   l.cfg.Source,
		Config:   l.pcfg,
		Out:      l.out,
		Context:  l.cfg.Context,
		Pending:  l.pending,
		OnChange: l.kick,
		OnRetry:  l.retryDue,
		Logger:   l.logger,
		Name:     l.cfg.Name,
	})
	if err != nil {
		return fmt.Errorf("berth: building receiver: %w", err)
	}
	l.mu.Lock()
	if l.stopping() {
		l.mu.Unlock()
		_ = nr.Close(context.Background())
		return transport.ErrClosed
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
		l.observe(func(o transport.Observer) { o.Rebuilt(l.cfg.Name) })
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

// Rebuild disposes of the current stage and builds a new one, whatever its
// state. The watchdog calls it for faulted stages.
func (l *Listener) Rebuild() error {
	if !l.started.Load() {
		return errors.New("berth: listener not started")
	}
	return l.replaceStage(true)
}

// Pause stops fetching and releases every prefetched delivery back to the
// broker. The listener stays paused, whatever back-pressure or the watchdog
// do, until Resume.
func (l *Listener) Pause(ctx context.Context) error {
	l.pauseMu.Lock()
	l.mu.Lock()
	l.paused = true
	r := l.recv
	l.mu.Unlock()
	l.pauseMu.Unlock()
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

// current returns the stage installed now.
func (l *Listener) current() pipe {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recv
}

// stopContext returns a context that ends when the listener stops (or
// cancel is called), for the calls its goroutines make.
func (l *Listener) stopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-l.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (l *Listener) stopping() bool {
	select {
	case <-l.stopCh:
		return true
	default:
		return false
	}
}

// observe calls the observer; a panicking observer is ignored.
func (l *Listener) observe(fn func(transport.Observer)) {
	guard.Do(func() { fn(l.pcfg.Observer) })
}

// logError logs; a panicking logger is ignored (the loop and the watchdog
// have no stage to fault).
func (l *Listener) logError(msg string, err error, fields watermill.LogFields) {
	guard.Do(func() { l.logger.Error(msg, err, fields) })
}

// logInfo is logError at info level.
func (l *Listener) logInfo(msg string, fields watermill.LogFields) {
	guard.Do(func() { l.logger.Info(msg, fields) })
}

// Close stops the loop and the watchdog, closes the stage (buffered
// deliveries released at once, in-flight ones drained until ctx is done)
// and closes the Messages channel. Like http.Server.Shutdown, it returns
// an error wrapping ctx.Err() when ctx ended before every in-flight message
// was settled: those were handed back for redelivery, within at most
// Config.CloseGrace past ctx. It is idempotent; later calls wait for the
// first and return its result.
func (l *Listener) Close(ctx context.Context) error {
	l.closeOnce.Do(func() {
		// bound ends CloseGrace after ctx does.
		bound, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stopBound := context.AfterFunc(ctx, func() { time.AfterFunc(l.pcfg.CloseGrace, cancel) })
		defer stopBound()
		close(l.stopCh)
		l.goroutines.Wait()
		var errs []error
		if r := l.current(); r != nil {
			errs = append(errs, r.Close(ctx))
		}
		if err := wait.Group(bound, &l.disposals); err != nil {
			errs = append(errs, fmt.Errorf("berth: closing: rebuilt receivers still closing: %w", ctx.Err()))
		}
		l.closeErr = errors.Join(errs...)
		l.out.close()
		close(l.closed)
	})
	<-l.closed
	return l.closeErr
}

// Closed is closed when Close has finished.
func (l *Listener) Closed() <-chan struct{} { return l.closed }

// isSequencer reports whether src needs sequenced dispatch: its deliveries
// must pass the buffer in claim order, so none is claimed started.
func isSequencer(src transport.Source) bool {
	_, ok := src.(transport.Sequencer)
	return ok
}
