package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/health"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all"
)

// The demo's embedded default is SQLite in a fresh temporary file (removed
// afterwards); --url picks any other transport.
const embeddedDefault = "sqlite (temporary file)"

// defaultTopic is the demo's orders topic; each order's audit event goes
// to the same topic suffixed "_audit".
const defaultTopic = "demo_orders"

// URL parameters the demo sets when the URL leaves them out, on every
// transport, so poison orders reach the dead letters in seconds rather
// than after the default ten attempts with backoff up to 30s (about 54s
// with the default 100ms first delay).
var demoURLDefaults = map[string]string{"max_attempts": "3", "retry_delay": "20ms"}

type demoOptions struct {
	url        string // the publisher's
	subURL     string // the subscriber's: url plus demoURLDefaults
	messages   int
	rate       float64
	fail       float64
	poison     float64
	batchSize  int
	topic      string
	healthAddr string
	progress   time.Duration
	timeout    time.Duration
	hold       time.Duration // keep the health endpoint up after the run
}

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("berth demo", "berth demo [flags]", `
Runs a small but real service: a publisher producing orders at --rate, a
Watermill router with a single-message handler that fails a fraction of
attempts (nacked, retried) and dead-letters poison orders, a batch handler
(package batching) for each order's audit event, and the health endpoint
(package health) on a local port. A progress line shows messages/s, the
listeners' QueueCount, wave size, latched (too busy) listeners, faults and
dead letters; a summary table ends the run, then the demo stops (or, with
--hold, keeps running idle so that berth health can query it).

With no --url it runs on SQLite in a temporary file. --url points the same
program at any transport: postgres://…, sqlserver://…, sqs://… (add
create=true and dead_letter_queue=NAME for SQS: without a dead-letter
queue a poison order returns to the queue and is counted again). Unless the URL sets them, the demo uses max_attempts=3
and retry_delay=20ms, on every transport.

Ctrl-C stops it early: the orders not settled by then are reported as in
flight (they stay on the queue). It exits 0 when every order was handled or
dead-lettered, 1 when interrupted or timed out first.`, stderr)
	var o demoOptions
	fs.StringVar(&o.url, "url", "", "transport URL (mem://, sqlite:///path.db, postgres://, sqlserver://, sqs://); default: "+embeddedDefault)
	fs.IntVar(&o.messages, "messages", 200, "orders to publish")
	fs.Float64Var(&o.rate, "rate", 500, "orders published per second")
	fs.Float64Var(&o.fail, "fail", 0.1, "probability that the order handler fails an attempt (nack and retry)")
	fs.Float64Var(&o.poison, "poison", 0.02, "fraction of orders that fail every attempt and end dead-lettered")
	fs.StringVar(&o.topic, "topic", defaultTopic, "orders topic (audit events go to TOPIC_audit)")
	fs.IntVar(&o.batchSize, "batch", 20, "audit batch size (the batch handler's MaxSize)")
	fs.StringVar(&o.healthAddr, "health-addr", "127.0.0.1:0", "where to serve /healthz, /readyz, /livez (port 0: any free port; \"\": off)")
	fs.DurationVar(&o.progress, "progress", 500*time.Millisecond, "progress line interval")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up after this long")
	fs.DurationVar(&o.hold, "hold", 0, "after the summary, keep the service and its health endpoint up this long (Ctrl-C ends it early)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("unexpected argument %q", pos[0])
	case o.messages < 1:
		return usagef("--messages must be ≥ 1")
	case o.rate <= 0:
		return usagef("--rate must be > 0")
	case o.fail < 0 || o.fail >= 1:
		return usagef("--fail must be in [0, 1)")
	case o.poison < 0 || o.poison > 1:
		return usagef("--poison must be in [0, 1]")
	case o.topic == "":
		return usagef("--topic must not be empty")
	case o.batchSize < 1:
		return usagef("--batch must be ≥ 1")
	case o.progress <= 0:
		return usagef("--progress must be > 0")
	case o.timeout <= 0:
		return usagef("--timeout must be > 0")
	case o.hold < 0:
		return usagef("--hold must be ≥ 0")
	case o.hold > 0 && o.healthAddr == "":
		return usagef("--hold keeps the health endpoint up: it needs --health-addr")
	}
	if o.url == "" {
		dir, err := os.MkdirTemp("", "berth-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.url = "sqlite://" + filepath.Join(dir, "demo.db")
	}
	u, err := url.Parse(o.url)
	if err != nil {
		return fmt.Errorf("%w: bad URL: %w", transport.ErrInvalidConfig, err)
	}
	q := u.Query()
	for k, v := range demoURLDefaults {
		if !q.Has(k) {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	o.subURL = u.String()
	return runDemo(ctx, o, stdout)
}

type demoStats struct {
	published, handled, failed, duplicates, deadLettered atomic.Int64
	auditPublished, batches, batched                     atomic.Int64
	mu                                                   sync.Mutex
	seen                                                 map[string]bool
	maxAttempts                                          int
	// changed is signalled, without blocking, after each count that may
	// complete the run.
	changed chan struct{}
}

func (st *demoStats) poke() {
	select {
	case st.changed <- struct{}{}:
	default:
	}
}

// inFlight is the orders published and not yet handled or dead-lettered.
func (st *demoStats) inFlight() int64 {
	return max(st.published.Load()-st.handled.Load()-st.deadLettered.Load(), 0)
}

// complete reports whether every published order is settled and every
// published audit event batched (the publisher must have finished).
func (st *demoStats) complete() bool {
	return st.inFlight() == 0 && st.batched.Load() >= st.auditPublished.Load()
}

// demoMaxAttempts is the subscriber URL's max_attempts (the demo always
// sets one), for counting dead letters as the pipeline makes them.
func demoMaxAttempts(subURL string) int {
	if u, err := url.Parse(subURL); err == nil {
		if n, err := strconv.Atoi(u.Query().Get("max_attempts")); err == nil {
			return n
		}
	}
	return receiver.DefaultMaxAttempts
}

func runDemo(ctx context.Context, o demoOptions, stdout io.Writer) error {
	// runCtx bounds the run (--timeout, Ctrl-C); --hold is bounded by ctx.
	runCtx, cancelRun := context.WithTimeout(ctx, o.timeout)
	defer cancelRun()
	logger := watermill.NopLogger{}
	pub, err := transport.OpenPublisher(runCtx, o.url, transport.WithLogger(logger))
	if err != nil {
		return err
	}
	defer pub.Close()
	sub, err := transport.OpenSubscriber(runCtx, o.subURL, transport.WithLogger(logger))
	if err != nil {
		return err
	}
	defer sub.Close()

	st := &demoStats{seen: map[string]bool{}, maxAttempts: demoMaxAttempts(o.subURL), changed: make(chan struct{}, 1)}

	healthURL := ""
	if o.healthAddr != "" {
		h, err := health.NewHandler(health.Config{})
		if err != nil {
			return err
		}
		if src, ok := sub.(health.Source); ok {
			if err := h.AddSource("demo", src); err != nil {
				return err
			}
		}
		ln, err := net.Listen("tcp", o.healthAddr)
		if err != nil {
			return fmt.Errorf("health endpoint: %w", err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = srv.Serve(ln)
		}()
		defer func() {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			_ = srv.Shutdown(sctx)
			<-served
		}()
		healthURL = "http://" + ln.Addr().String() + "/healthz"
	}

	// Create the topics' queues first: a broker that cannot be reached
	// fails here, before the router starts (a Watermill router whose Run
	// fails leaks its watcher goroutines).
	if si, ok := sub.(message.SubscribeInitializer); ok {
		for _, topic := range []string{o.topic, o.topic + "_audit"} {
			if err := si.SubscribeInitialize(topic); err != nil {
				return fmt.Errorf("initialize topic %s: %w", topic, err)
			}
		}
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 15 * time.Second}, logger)
	if err != nil {
		return err
	}
	// A dead letter's reason ends with the handler's error ("…: poison order").
	router.AddMiddleware(receiver.DeadLetterReason())
	// settled records a message's outcome; the first one counts, a later
	// one is a duplicate (a broker may deliver a message again: SQS
	// standard queues at least once, and an SQS queue without a
	// dead-letter queue hands a dead letter back).
	settled := func(uuid string, deadLettered bool) {
		st.mu.Lock()
		first := !st.seen[uuid]
		st.seen[uuid] = true
		st.mu.Unlock()
		switch {
		case !first:
			st.duplicates.Add(1)
		case deadLettered:
			st.deadLettered.Add(1)
		default:
			st.handled.Add(1)
		}
		st.poke()
	}
	router.AddConsumerHandler("orders", o.topic, sub, func(m *message.Message) error {
		poison := m.Metadata.Get("demo_poison") == "true"
		if poison || rand.Float64() < o.fail {
			st.failed.Add(1)
			// A failure on the last attempt is dead-lettered by the pipeline.
			if a, err := strconv.Atoi(m.Metadata.Get(transport.MetadataAttempt)); err == nil && st.maxAttempts > 0 && a >= st.maxAttempts {
				settled(m.UUID, true)
			}
			if poison {
				return fmt.Errorf("order %s: poison order", m.UUID)
			}
			return fmt.Errorf("order %s: simulated failure", m.UUID)
		}
		settled(m.UUID, false)
		return nil
	})
	// The audit events go to a batch handler: the router gets one message
	// per batch from a batching.Subscriber, and closing the router closes
	// it (flushing its open batch first).
	audit, err := batching.NewSubscriber(sub, batching.Config{MaxSize: o.batchSize, MaxWait: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	router.AddConsumerHandler("audit", o.topic+"_audit", audit, batching.HandlerFunc(func(_ context.Context, msgs []*message.Message) error {
		st.batches.Add(1)
		st.batched.Add(int64(len(msgs)))
		st.poke()
		return nil
	}))
	// The router runs until stop closes it, after the summary (and --hold).
	routerErr := make(chan error, 1)
	go func() { routerErr <- router.Run(context.WithoutCancel(ctx)) }()
	select {
	case <-router.Running():
	case err := <-routerErr:
		_ = router.Close() // stops the router's own watcher goroutine
		return err
	}
	// stop closes the router, which starts closing the audit
	// batching.Subscriber: it hands its open batch to the router before the
	// subscription ends, and its own Close waits until that is done.
	stop := sync.OnceFunc(func() {
		_ = router.Close()
		<-routerErr
		_ = audit.Close()
	})
	defer stop()

	healthAddr := strings.TrimSuffix(healthURL, "/healthz")
	switch {
	case healthURL != "" && o.hold > 0:
		fmt.Fprintf(stdout, "health: %s  (try: berth health --addr %s; up until %s after the run)\n", healthURL, healthAddr, o.hold)
	case healthURL != "":
		fmt.Fprintf(stdout, "health: %s  (try: berth health --addr %s while it runs, or run with --hold 1m)\n", healthURL, healthAddr)
	}
	start := time.Now()
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		tick := time.NewTicker(time.Duration(float64(time.Second) / o.rate))
		defer tick.Stop()
		for i := 0; i < o.messages; i++ {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			m := message.NewMessage(watermill.NewUUID(), []byte(`{"order":`+strconv.Itoa(i)+`}`))
			if rand.Float64() < o.poison {
				m.Metadata.Set("demo_poison", "true")
			}
			a := message.NewMessage(watermill.NewUUID(), []byte(`{"audit":`+strconv.Itoa(i)+`}`))
			if err := pub.Publish(o.topic, m); err != nil {
				continue
			}
			st.published.Add(1)
			if err := pub.Publish(o.topic+"_audit", a); err == nil {
				st.auditPublished.Add(1)
			}
		}
	}()

	states := func() []transport.ListenerState {
		if s, ok := sub.(health.Source); ok {
			return s.ListenerStates()
		}
		return nil
	}
	progress := time.NewTicker(o.progress)
	defer progress.Stop()
	// stopped says why the run ended before every order settled; "" when
	// it completed.
	stopped := ""
	published := pubDone
loop:
	for published != nil || !st.complete() {
		select {
		case <-published:
			published = nil // all published (or given up): from now on, complete() decides
		case <-st.changed:
		case <-runCtx.Done():
			stopped = "interrupted"
			if ctx.Err() == nil {
				stopped = "the --timeout (" + o.timeout.String() + ") passed"
			}
			break loop
		case <-progress.C:
			printProgress(stdout, st, states(), time.Since(start))
		}
	}
	elapsed := time.Since(start)
	cancelRun()
	<-pubDone
	final := states()
	if stopped != "" {
		// Handlers still running settle their orders as the router closes.
		fmt.Fprintf(stdout, "%s: stopping…\n", stopped)
		stop()
	}
	printProgress(stdout, st, final, elapsed)
	printSummary(stdout, o, st, final, elapsed, healthURL, stopped)
	if stopped != "" {
		return fmt.Errorf("%s with %d order(s) in flight", stopped, st.inFlight())
	}
	if o.hold > 0 {
		fmt.Fprintf(stdout, "holding for %s (Ctrl-C ends it): berth health --addr %s\n", o.hold, healthAddr)
		t := time.NewTimer(o.hold)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	fmt.Fprintln(stdout, "stopping the router and the subscriber…")
	began := time.Now()
	stop()
	fmt.Fprintf(stdout, "stopped in %.1fs\n", time.Since(began).Seconds())
	return nil
}

type listenerTotals struct{ queue, wave, latched, faults int }

func totals(ls []transport.ListenerState) listenerTotals {
	var t listenerTotals
	for _, l := range ls {
		t.queue += l.QueueCount
		t.wave = max(t.wave, l.Wave)
		if l.Latched {
			t.latched++
		}
		if l.Faulted {
			t.faults++
		}
	}
	return t
}

func printProgress(w io.Writer, st *demoStats, ls []transport.ListenerState, elapsed time.Duration) {
	t := totals(ls)
	rate := float64(st.handled.Load()) / max(elapsed.Seconds(), 1e-9)
	fmt.Fprintf(w, "%6.1fs  published %5d  handled %5d  %7.1f msg/s  queue %3d  wave %2d  latched %d  faults %d  dead-lettered %d  batches %d\n",
		elapsed.Seconds(), st.published.Load(), st.handled.Load(), rate, t.queue, t.wave, t.latched, t.faults, st.deadLettered.Load(), st.batches.Load())
}

// printSummary prints the run's table. stopped says why the run ended
// early ("" when it completed): then the orders not yet settled are in
// flight, not lost.
func printSummary(w io.Writer, o demoOptions, st *demoStats, ls []transport.ListenerState, elapsed time.Duration, healthURL, stopped string) {
	t := totals(ls)
	rebuilds := int64(0)
	for _, l := range ls {
		rebuilds += l.Rebuilds
	}
	fmt.Fprintln(w, "\nSummary")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "transport\t%s\n", transportText(o))
	fmt.Fprintf(tw, "published\t%d\n", st.published.Load())
	fmt.Fprintf(tw, "handled\t%d\n", st.handled.Load())
	fmt.Fprintf(tw, "failed attempts (retried)\t%d\n", st.failed.Load())
	if u, err := url.Parse(o.subURL); err == nil && u.Scheme == "sqs" && u.Query().Get("dead_letter_queue") == "" {
		// Without a dead-letter queue a dead letter returns to the
		// queue (its redrive policy, if any, moves it).
		fmt.Fprintf(tw, "dead-lettered\t%d (returned to the queue: no dead_letter_queue)\n", st.deadLettered.Load())
	} else {
		fmt.Fprintf(tw, "dead-lettered\t%d\n", st.deadLettered.Load())
	}
	fmt.Fprintf(tw, "duplicates\t%d\n", st.duplicates.Load())
	if stopped == "" {
		fmt.Fprintf(tw, "lost\t%d\n", st.inFlight())
	} else {
		fmt.Fprintf(tw, "in flight\t%d (not settled when %s; they stay on the queue)\n", st.inFlight(), stopped)
	}
	fmt.Fprintf(tw, "audit batches\t%d (%d events)\n", st.batches.Load(), st.batched.Load())
	fmt.Fprintf(tw, "throughput\t%.1f msg/s\n", float64(st.handled.Load())/max(elapsed.Seconds(), 1e-9))
	fmt.Fprintf(tw, "listeners\t%d (latched %d, faulted %d, rebuilds %d)\n", len(ls), t.latched, t.faults, rebuilds)
	if healthURL != "" {
		fmt.Fprintf(tw, "health endpoint\t%s\n", healthURL)
	}
	fmt.Fprintf(tw, "elapsed\t%s\n", elapsed.Round(time.Millisecond))
	_ = tw.Flush()
}

// transportText is the URL the demo was given, redacted, and the
// parameters it added for the subscriber: "mem:// (max_attempts=3
// retry_delay=20ms added)".
func transportText(o demoOptions) string {
	pu, err1 := url.Parse(o.url)
	su, err2 := url.Parse(o.subURL)
	if err1 != nil || err2 != nil {
		return redact(o.subURL)
	}
	var added []string
	for k, v := range su.Query() {
		if !pu.Query().Has(k) {
			added = append(added, k+"="+strings.Join(v, ","))
		}
	}
	if len(added) == 0 {
		return redact(o.url)
	}
	slices.Sort(added)
	return redact(o.url) + " (" + strings.Join(added, " ") + " added)"
}

// redact hides raw's password, in the user info or as the password
// parameter (PostgreSQL, SQL Server); a URL without one prints as given.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	_, inUser := u.User.Password()
	q := u.Query()
	if !inUser && !q.Has("password") {
		return raw
	}
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
