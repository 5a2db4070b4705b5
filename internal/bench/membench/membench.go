package membench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/internal/subopt"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// ScenarioName is the name the scenario is registered under.
const ScenarioName = "batching/memory"

// Strategies of the two runs the scenario makes.
const (
	StrategyAccountingOn  = "accounting-on"
	StrategyAccountingOff = "accounting-off"
)

// Defaults of Config, for fields left zero.
const (
	DefaultMessages       = 200_000
	DefaultPayloadSize    = 4 << 10
	DefaultArrivalRate    = 10_000.0 // messages per second
	DefaultSlowFactor     = 10.0
	DefaultBatchSize      = batching.DefaultMaxSize
	DefaultHeapCap        = 2 << 30
	DefaultRSSCap         = 4 << 30
	DefaultSampleInterval = 100 * time.Millisecond
	DefaultPublishChunk   = 50
	preloadChunk          = 500
)

func init() {
	bench.Register(bench.Scenario{
		Name: ScenarioName,
		Description: "200,000 messages of 4 KiB flood a batch handler 10× slower than arrivals over SQLite; " +
			"heap and RSS over time with batch-pending accounting on, then off (subopt.Options.IgnoreBatchPending), " +
			"under a Watermill router (a batching.Handler; a batching.Subscriber) and under batching.Consume",
		Run: scenario,
	})
}

// Config configures one flood. The zero value is the documented full-size
// run with accounting on.
type Config struct {
	// Messages is the number of messages published. Defaults to
	// DefaultMessages (200,000).
	Messages int
	// PayloadSize is each message's payload in bytes (at least 8: the
	// message number). Defaults to DefaultPayloadSize (4 KiB).
	PayloadSize int
	// ArrivalRate is the publisher's pace in messages per second. Defaults
	// to DefaultArrivalRate (10,000).
	ArrivalRate float64
	// Preload is the number of messages inserted before the consumer
	// starts (the backlog a restarted service finds); the rest are
	// published at ArrivalRate while it runs. Negative means none.
	// Defaults to half of Messages.
	Preload int
	// SlowFactor is how many times slower than arrivals the batch handler
	// is: each batch takes len(batch) × SlowFactor / ArrivalRate, one batch
	// at a time. Defaults to DefaultSlowFactor (10).
	SlowFactor float64
	// BatchSize is batching.Config.MaxSize. Defaults to DefaultBatchSize
	// (100).
	BatchSize int
	// MaxQueue and RestartQueue are the listener's back-pressure
	// thresholds. Default to receiver.DefaultMaxQueue (1000) and 70% of
	// MaxQueue.
	MaxQueue     int
	RestartQueue int
	// IgnoreBatchPending sets subopt.Options.IgnoreBatchPending on the
	// run's Subscribe context:
	// batch-pending messages are left out of QueueCount, as in a batching
	// stage the listener cannot see. The run then ends as soon as the queue
	// table has drained into memory, or at HeapCap. Defaults to false.
	IgnoreBatchPending bool
	// HeapCap and RSSCap end the run when heap in use or the resident set
	// exceeds them, so a run without accounting cannot take the machine
	// down. Default to DefaultHeapCap (2 GiB) and DefaultRSSCap (4 GiB).
	HeapCap uint64
	RSSCap  uint64
	// Form is how the batch handler consumes the subscription: FormRouter
	// (a Watermill router with a batching.Handler), FormConsume
	// (batching.Consume) or FormBatches (a Watermill router over a
	// batching.Subscriber with batching.HandlerFunc). Defaults to
	// FormRouter.
	Form Form
	// SampleInterval is the memory sampling period. Defaults to
	// DefaultSampleInterval (100ms).
	SampleInterval time.Duration
	// Dir is where the temporary SQLite database is created (and removed).
	// Defaults to os.TempDir().
	Dir string
	// HeapProfile, when set, is a file to write a pprof heap profile to:
	// when half the messages have been handled, or when the run ends if
	// that comes first (for a run without accounting: at its peak).
	// Defaults to "": none.
	HeapProfile string
	// Progress, when set, receives the fraction done and a short status
	// once per sample. Defaults to nil.
	Progress func(fraction float64, status string)
}

// Form is a way to run a batch handler over a subscription.
type Form string

// The forms of Config.Form.
const (
	FormRouter  Form = "router"
	FormConsume Form = "consume"
	FormBatches Form = "batches"
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Messages == 0 {
		c.Messages = DefaultMessages
	}
	if c.Preload == 0 {
		c.Preload = c.Messages / 2
	}
	if c.PayloadSize == 0 {
		c.PayloadSize = DefaultPayloadSize
	}
	if c.ArrivalRate == 0 {
		c.ArrivalRate = DefaultArrivalRate
	}
	if c.SlowFactor == 0 {
		c.SlowFactor = DefaultSlowFactor
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = receiver.DefaultMaxQueue
	}
	if c.RestartQueue == 0 {
		c.RestartQueue = c.MaxQueue * 7 / 10
	}
	if c.HeapCap == 0 {
		c.HeapCap = DefaultHeapCap
	}
	if c.RSSCap == 0 {
		c.RSSCap = DefaultRSSCap
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = DefaultSampleInterval
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.Form == "" {
		c.Form = FormRouter
	}
	return c
}

// Validate reports every invalid field of c (after defaults) at once,
// wrapped in transport.ErrInvalidConfig.
func (c Config) Validate() error {
	d := c.WithDefaults()
	var errs []error
	if d.Messages < 1 {
		errs = append(errs, fmt.Errorf("Messages: must be ≥ 1, got %d", c.Messages))
	}
	if d.PayloadSize < 8 {
		errs = append(errs, fmt.Errorf("PayloadSize: must be ≥ 8, got %d", c.PayloadSize))
	}
	if !(d.ArrivalRate > 0) || math.IsInf(d.ArrivalRate, 0) {
		errs = append(errs, fmt.Errorf("ArrivalRate: must be > 0, got %v", c.ArrivalRate))
	}
	if !(d.SlowFactor > 0) || math.IsInf(d.SlowFactor, 0) {
		errs = append(errs, fmt.Errorf("SlowFactor: must be > 0, got %v", c.SlowFactor))
	}
	if d.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("BatchSize: must be ≥ 1, got %d", c.BatchSize))
	}
	if d.MaxQueue < 1 {
		errs = append(errs, fmt.Errorf("MaxQueue: must be ≥ 1, got %d", c.MaxQueue))
	}
	if d.RestartQueue < 0 || d.RestartQueue >= d.MaxQueue {
		errs = append(errs, fmt.Errorf("RestartQueue: must be ≥ 0 and below MaxQueue (%d), got %d", d.MaxQueue, c.RestartQueue))
	}
	if d.SampleInterval < 0 {
		errs = append(errs, fmt.Errorf("SampleInterval: must be > 0, got %s", c.SampleInterval))
	}
	switch d.Form {
	case FormRouter, FormConsume, FormBatches:
	default:
		errs = append(errs, fmt.Errorf("Form: must be %q, %q or %q, got %q", FormRouter, FormConsume, FormBatches, c.Form))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", transport.ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// TargetHeap is the bound on peak heap with accounting on:
// (MaxQueue + one wave) × 2 × PayloadSize + 64 MiB.
func (c Config) TargetHeap() uint64 {
	c = c.WithDefaults()
	wave := receiver.Config{}.WithDefaults().WaveCap
	return uint64(c.MaxQueue+wave)*2*uint64(c.PayloadSize) + 64<<20
}

// scenario is the registered bench.Scenario: the flood with accounting on,
// under a router and under Consume, then the same two with it off (off
// last: it leaves the heap larger for good, see the package doc).
func scenario(ctx context.Context, env bench.Env) ([]bench.Result, error) {
	scale := env.Scale
	if scale <= 0 {
		scale = 1
	}
	n := max(int(math.Round(DefaultMessages*scale)), 1000)
	runs := []struct {
		cfg    Config
		lo, hi float64 // share of the progress bar (runs without accounting are shorter)
	}{
		{Config{Messages: n}, 0, 0.2},
		{Config{Messages: n, Form: FormConsume}, 0.2, 0.4},
		{Config{Messages: n, Form: FormBatches}, 0.4, 0.6},
		{Config{Messages: n, IgnoreBatchPending: true}, 0.6, 0.73},
		{Config{Messages: n, IgnoreBatchPending: true, Form: FormConsume}, 0.73, 0.86},
		{Config{Messages: n, IgnoreBatchPending: true, Form: FormBatches}, 0.86, 1},
	}
	var results []bench.Result
	for _, r := range runs {
		if env.Progress != nil {
			lo, hi := r.lo, r.hi
			r.cfg.Progress = func(f float64, s string) { env.Progress(lo+(hi-lo)*f, s) }
		}
		res, err := Run(ctx, r.cfg)
		if err != nil {
			return results, fmt.Errorf("membench: run with IgnoreBatchPending=%v Form=%s: %w", r.cfg.IgnoreBatchPending, r.cfg.Form, err)
		}
		results = append(results, res)
	}
	return results, nil
}

// ledger counts handlings per message number.
type ledger struct {
	mu       sync.Mutex
	counts   []uint32
	distinct int
	dups     int
	all      chan struct{} // closed when every message was handled
}

func newLedger(n int) *ledger {
	return &ledger{counts: make([]uint32, n), all: make(chan struct{})}
}

func (l *ledger) record(msgs []*message.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range msgs {
		if len(m.Payload) < 8 {
			continue
		}
		i := binary.BigEndian.Uint64(m.Payload)
		if i >= uint64(len(l.counts)) {
			continue
		}
		l.counts[i]++
		switch l.counts[i] {
		case 1:
			l.distinct++
			if l.distinct == len(l.counts) {
				close(l.all)
			}
		case 2:
			l.dups++
		}
	}
}

func (l *ledger) snapshot() (distinct, dups int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.distinct, l.dups
}

// sample is one reading taken during the run.
type sample struct {
	at      time.Duration
	mem     memory
	held    int // buffered + in flight + batch pending, whatever QueueCount counts
	queue   int // QueueCount as back-pressure sees it
	handled int
}

// Run floods a Watermill router with a batching.Handler (or
// batching.Consume, with cfg.Consume) over a SQLite queue in a temporary
// file, and returns the memory it took over time. cfg.Preload messages are
// inserted before the consumer starts; the rest are published at
// cfg.ArrivalRate from one goroutine (one Publish of DefaultPublishChunk
// messages at a time, from one reused buffer, so the publisher holds
// little), while the batch handler handles them cfg.SlowFactor times slower.
//
// Runs must not overlap: memory is measured process-wide.
func Run(ctx context.Context, cfg Config) (bench.Result, error) {
	if err := cfg.Validate(); err != nil {
		return bench.Result{}, err
	}
	cfg = cfg.WithDefaults()
	preload := min(max(cfg.Preload, 0), cfg.Messages)
	strategy := StrategyAccountingOn
	if cfg.IgnoreBatchPending {
		strategy = StrategyAccountingOff
		// Only this run's listener leaves batch pending out of QueueCount.
		ctx = subopt.With(ctx, subopt.Options{IgnoreBatchPending: true})
	}

	dir, err := os.MkdirTemp(cfg.Dir, "berth-membench-*")
	if err != nil {
		return bench.Result{}, fmt.Errorf("membench: %w", err)
	}
	defer os.RemoveAll(dir)
	db, dbCloser, err := sqlite.Open(filepath.Join(dir, "queue.db"))
	if err != nil {
		return bench.Result{}, fmt.Errorf("membench: open sqlite: %w", err)
	}
	defer dbCloser.Close()

	const topic = "flood"
	pub, err := sqlite.NewPublisher(sqlite.PublisherConfig{DB: db}, nil)
	if err != nil {
		return bench.Result{}, fmt.Errorf("membench: %w", err)
	}
	defer pub.Close()
	sc := sqlqueue.SubscriberConfig{DB: db}
	sc.Pipeline = receiver.Config{
		MaxQueue:     cfg.MaxQueue,
		RestartQueue: cfg.RestartQueue,
		MaxAttempts:  -1,
		DrainTimeout: 2 * time.Second,
	}
	sub, err := sqlite.NewSubscriber(sc, nil)
	if err != nil {
		return bench.Result{}, fmt.Errorf("membench: %w", err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		return bench.Result{}, fmt.Errorf("membench: %w", err)
	}

	led := newLedger(cfg.Messages)
	perMember := time.Duration(float64(time.Second) * cfg.SlowFactor / cfg.ArrivalRate)
	fn := func(ctx context.Context, msgs []*message.Message) error {
		t := time.NewTimer(time.Duration(len(msgs)) * perMember)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		led.record(msgs)
		return nil
	}
	bcfg := batching.Config{MaxSize: cfg.BatchSize, FlushTimeout: time.Second}
	if cfg.Form != FormRouter {
		strategy += "-" + string(cfg.Form)
	}
	// The backlog, before the consumer starts and before the baseline.
	var published atomic.Int64
	if err := publish(pub, topic, cfg.PayloadSize, 0, preload, preloadChunk, 0, time.Now(), ctx.Done(), &published); err != nil {
		return bench.Result{}, fmt.Errorf("membench: preload: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return bench.Result{}, err
	}

	// Baseline: everything built, nothing flowing.
	rd := newReader()
	runtime.GC()
	debug.FreeOSMemory()
	base := rd.read()

	start := time.Now()
	stopConsumer, err := startConsumer(ctx, cfg.Form, sub, topic, bcfg, fn)
	if err != nil {
		return bench.Result{}, err
	}

	// The publisher: paced, one chunk in flight, one reused payload buffer.
	stopPub := make(chan struct{})
	pubDone := make(chan struct{})
	var (
		pubErr  error
		pubTook time.Duration
	)
	go func() {
		defer close(pubDone)
		pubErr = publish(pub, topic, cfg.PayloadSize, preload, cfg.Messages, DefaultPublishChunk, cfg.ArrivalRate, start, stopPub, &published)
		pubTook = time.Since(start)
	}()

	// The sampler.
	var (
		smu         sync.Mutex
		samples     []sample
		profiled    bool
		profileErr  error
		stopSampler = make(chan struct{})
		samplerDone = make(chan struct{})
		end         = make(chan string, 1)
	)
	signal := func(why string) {
		select {
		case end <- why:
		default:
		}
	}
	writeProfile := func() {
		if cfg.HeapProfile == "" || profiled {
			return
		}
		profiled = true
		profileErr = writeHeapProfile(cfg.HeapProfile)
	}
	go func() {
		defer close(samplerDone)
		t := time.NewTicker(cfg.SampleInterval)
		defer t.Stop()
		var l *receiver.Listener
		for {
			select {
			case <-t.C:
			case <-stopSampler:
				return
			}
			if l == nil {
				if ls := sub.Listeners(); len(ls) > 0 {
					l = ls[0]
				}
			}
			s := sample{at: time.Since(start), mem: rd.read()}
			if l != nil {
				st := l.State()
				s.held = st.Buffered + st.InFlight + st.BatchPending
				s.queue = st.QueueCount
			}
			s.handled, _ = led.snapshot()
			smu.Lock()
			samples = append(samples, s)
			smu.Unlock()
			pubN := int(published.Load())
			if s.handled*2 >= cfg.Messages {
				writeProfile()
			}
			if cfg.Progress != nil {
				f := float64(s.handled) / float64(cfg.Messages)
				if cfg.IgnoreBatchPending {
					f = float64(s.held+s.handled) / float64(cfg.Messages)
				}
				cfg.Progress(min(f, 1), fmt.Sprintf("%s: published %d, held %d, handled %d, heap %d MiB",
					strategy, pubN, s.held, s.handled, s.mem.HeapInuse>>20))
			}
			if s.mem.HeapInuse > cfg.HeapCap {
				signal("heap cap")
			}
			if s.mem.RSS > cfg.RSSCap {
				signal("RSS cap")
			}
			if cfg.IgnoreBatchPending && pubN == cfg.Messages && s.held+s.handled >= cfg.Messages {
				signal("drained into memory")
			}
		}
	}()

	var why string
	select {
	case <-led.all:
		why = "all handled"
	case why = <-end:
	case <-pubDone:
		if pubErr != nil {
			why = "publish failed"
			break
		}
		select {
		case <-led.all:
			why = "all handled"
		case why = <-end:
		case <-ctx.Done():
			why = "cancelled"
		}
	case <-ctx.Done():
		why = "cancelled"
	}
	elapsed := time.Since(start)

	// Stop the sampler first, so the shutdown is not in the series.
	close(stopSampler)
	<-samplerDone
	writeProfile()
	close(stopPub)
	<-pubDone

	stopConsumer()
	_ = sub.Close()
	_ = pub.Close()

	distinct, dups := led.snapshot()
	res := summarize(cfg, strategy, base, samples, elapsed, int(published.Load()), distinct, dups)
	if n := published.Load() - int64(preload); n > 0 && pubTook > 0 {
		res.Metrics["arrival_msg_per_s"] = float64(n) / pubTook.Seconds()
	}
	res.Metrics["preloaded"] = float64(preload)
	res.Notes = "ended: " + why
	if why == "cancelled" {
		return res, ctx.Err()
	}
	if pubErr != nil {
		return res, fmt.Errorf("membench: publish: %w", pubErr)
	}
	if profileErr != nil {
		return res, fmt.Errorf("membench: heap profile: %w", profileErr)
	}

	// Leave the next run a clean heap.
	runtime.GC()
	debug.FreeOSMemory()
	return res, nil
}

// startConsumer starts the batch handler in form on topic and returns the
// function that stops it: the router (or Consume) stops taking messages
// while the batching stage ends its batches (running ones cancelled after a
// second, waiting ones nacked). With FormBatches the router closes sub.
func startConsumer(ctx context.Context, form Form, sub message.Subscriber, topic string, bcfg batching.Config, fn batching.BatchFunc) (stop func(), err error) {
	if form == FormConsume {
		cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		msgs, err := sub.Subscribe(cctx, topic)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("membench: %w", err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = batching.Consume(cctx, msgs, bcfg, fn)
		}()
		return func() { cancel(); <-done }, nil
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: time.Minute}, nil)
	if err != nil {
		return nil, fmt.Errorf("membench: %w", err)
	}
	var (
		h  *batching.Handler
		bs *batching.Subscriber
	)
	if form == FormBatches {
		if bs, err = batching.NewSubscriber(sub, bcfg); err != nil {
			return nil, fmt.Errorf("membench: %w", err)
		}
		router.AddConsumerHandler("membench", topic, bs, batching.HandlerFunc(fn))
	} else {
		if h, err = batching.NewHandler(bcfg, fn); err != nil {
			return nil, fmt.Errorf("membench: %w", err)
		}
		router.AddConsumerHandler("membench", topic, sub, h.Handle)
	}
	closeHandler := func(ctx context.Context) {
		if h != nil {
			_ = h.Close(ctx)
		}
		if bs != nil {
			_ = bs.Close() // the router started it; this waits for it
		}
	}
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(context.WithoutCancel(ctx)) }()
	select {
	case <-router.Running():
	case err := <-runErr:
		closeHandler(context.Background())
		return nil, fmt.Errorf("membench: router: %w", err)
	}
	return func() {
		routerClosed := make(chan error, 1)
		go func() { routerClosed <- router.Close() }()
		hctx, cancel := context.WithTimeout(context.Background(), time.Second)
		closeHandler(hctx)
		cancel()
		<-routerClosed
		<-runErr
	}, nil
}

// publish publishes messages [from, to) in chunks, paced at rate messages
// per second from start (rate 0: as fast as Publish returns), from one
// reused payload buffer.
func publish(pub message.Publisher, topic string, payloadSize, from, to, chunk int, rate float64, start time.Time, stop <-chan struct{}, published *atomic.Int64) error {
	buf := make([]byte, chunk*payloadSize)
	msgs := make([]*message.Message, 0, chunk)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := from; i < to; i += chunk {
		var due time.Duration
		if rate > 0 {
			due = time.Duration(float64(i-from) / rate * float64(time.Second))
		}
		if d := time.Until(start.Add(due)); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-stop:
				return nil
			}
		} else {
			select {
			case <-stop:
				return nil
			default:
			}
		}
		msgs = msgs[:0]
		for j := i; j < min(i+chunk, to); j++ {
			p := buf[(j-i)*payloadSize : (j-i+1)*payloadSize]
			binary.BigEndian.PutUint64(p, uint64(j))
			msgs = append(msgs, message.NewMessage(watermill.NewUUID(), p))
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			return err
		}
		published.Add(int64(len(msgs)))
		clear(msgs)
	}
	return nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC() // the profile shows live objects as of the last GC
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// summarize turns the samples into a bench.Result.
func summarize(cfg Config, strategy string, base memory, samples []sample, elapsed time.Duration, published, distinct, dups int) bench.Result {
	res := bench.Result{
		Scenario:  ScenarioName,
		Strategy:  strategy,
		Instances: 1,
		Messages:  distinct,
		Duration:  elapsed,
		Metrics:   map[string]float64{},
		Series:    map[string][]bench.Point{},
	}
	var peak memory
	peakHeld, peakQueue := 0, 0
	for _, s := range samples {
		peak.HeapInuse = max(peak.HeapInuse, s.mem.HeapInuse)
		peak.HeapLive = max(peak.HeapLive, s.mem.HeapLive)
		peak.Stacks = max(peak.Stacks, s.mem.Stacks)
		peak.RSS = max(peak.RSS, s.mem.RSS)
		peak.Goroutine = max(peak.Goroutine, s.mem.Goroutine)
		peakHeld = max(peakHeld, s.held)
		peakQueue = max(peakQueue, s.queue)
		point := func(name string, v float64) {
			res.Series[name] = append(res.Series[name], bench.Point{At: s.at, Value: v})
		}
		point("heap_inuse_bytes", float64(s.mem.HeapInuse))
		point("rss_bytes", float64(s.mem.RSS))
		point("heap_live_bytes", float64(s.mem.HeapLive))
		point("stack_bytes", float64(s.mem.Stacks))
		point("held_messages", float64(s.held))
		point("handled_messages", float64(s.handled))
	}
	m := res.Metrics
	m["messages_target"] = float64(cfg.Messages)
	m["payload_bytes"] = float64(cfg.PayloadSize)
	m["published"] = float64(published)
	m["handled"] = float64(distinct)
	m["duplicates"] = float64(dups)
	m["max_queue"] = float64(cfg.MaxQueue)
	m["handled_msg_per_s"] = float64(distinct) / elapsed.Seconds()
	if len(samples) > 0 {
		// What the listener took off the queue per second: everything
		// handled or held by the last sample.
		last := samples[len(samples)-1]
		m["intake_msg_per_s"] = float64(last.held+last.handled) / last.at.Seconds()
	}
	m["baseline_heap_inuse_bytes"] = float64(base.HeapInuse)
	m["baseline_rss_bytes"] = float64(base.RSS)
	m["peak_heap_inuse_bytes"] = float64(peak.HeapInuse)
	m["peak_heap_live_bytes"] = float64(peak.HeapLive)
	m["peak_stack_bytes"] = float64(peak.Stacks)
	m["peak_rss_bytes"] = float64(peak.RSS)
	m["peak_goroutines"] = float64(peak.Goroutine)
	m["peak_held_messages"] = float64(peakHeld)
	m["peak_queue_count"] = float64(peakQueue)
	m["target_heap_bytes"] = float64(cfg.TargetHeap())
	if cfg.IgnoreBatchPending {
		m["lost"] = 0 // the run stops early by design: only duplicates count
	} else {
		m["lost"] = float64(cfg.Messages - distinct)
	}

	// Bytes per held message, two ways. Ratio: live heap above the baseline
	// over the held count, median of the samples with the listener full
	// (held ≥ RestartQueue); noisy when few messages are held, since the
	// publisher's chunk and the GC's own lag are in the numerator. Slope:
	// least squares of live heap (and of stacks) against held count over
	// every sample with something held; precise when held varies widely
	// (a run without accounting).
	var ratios []float64
	var xs, ys, zs []float64
	for _, s := range samples {
		if s.held >= cfg.RestartQueue {
			ratios = append(ratios, (float64(s.mem.HeapLive)-float64(base.HeapLive))/float64(s.held))
		}
		if s.held > 0 {
			xs = append(xs, float64(s.held))
			ys = append(ys, float64(s.mem.HeapLive))
			zs = append(zs, float64(s.mem.Stacks))
		}
	}
	if len(ratios) > 0 {
		slices.Sort(ratios)
		m["bytes_per_held_msg_ratio"] = ratios[len(ratios)/2]
	}
	if slope, ok := leastSquares(xs, ys); ok {
		m["bytes_per_held_msg_slope"] = slope
	}
	if slope, ok := leastSquares(xs, zs); ok {
		m["stack_bytes_per_held_msg_slope"] = slope
	}

	// Flatness: heap in use over the steady middle of the run (from when
	// 10% to when 90% of the messages were handled), as a least-squares
	// slope and as the range of the values.
	var ts, hs []float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range samples {
		if s.handled*10 >= cfg.Messages && s.handled*10 <= 9*cfg.Messages {
			ts = append(ts, s.at.Seconds())
			v := float64(s.mem.HeapInuse)
			hs = append(hs, v)
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if slope, ok := leastSquares(ts, hs); ok {
		m["steady_heap_inuse_slope_bytes_per_s"] = slope
		m["steady_heap_inuse_min_bytes"] = lo
		m["steady_heap_inuse_max_bytes"] = hi
	}
	return res
}

// leastSquares returns the slope of the least-squares line through (x, y).
func leastSquares(x, y []float64) (float64, bool) {
	if len(x) < 3 || len(x) != len(y) {
		return 0, false
	}
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	n := float64(len(x))
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
	}
	if sxx == 0 {
		return 0, false
	}
	return sxy / sxx, true
}
