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
}

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("berth demo", "berth demo [flags]", `
Runs a small but real service: a publisher producing orders at --rate, a
Watermill router with a single-message handler that fails a fraction of
attempts (nacked, retried) and dead-letters poison orders, a batch handler
(package batching) for each order's audit event, and the health endpoint
(package health) on a local port. A progress line shows messages/s, the
listeners' QueueCount, wave size, latched (too busy) listeners, faults and
dead letters; a summary table ends the run.

With no --url it runs on SQLite in a temporary file. --url points the same
program at any transport: postgres://…, sqlserver://…, sqs://… (add
create=true for SQS). Unless the URL sets them, the demo uses max_attempts=3
and retry_delay=20ms, on every transport.`, stderr)
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
	batches, batched                                     atomic.Int64
	mu                                                   sync.Mutex
	seen                                                 map[string]bool
	maxAttempts                                          int
}

// demoMaxAttempts is the subscriber URL's max_attempts (the demo always
// sets one), for counting dead letters as the pipeline makes them.
func demoMaxAttempts(subURL string) int {
	if u, err := url.Parse(subURL); err == nil {
		if n, err := strconv.Atoi(u.Query().Get("max_attempts")); err == nil {
			return n
		}
	}
	return transport.DefaultMaxAttempts
}

func runDemo(ctx context.Context, o demoOptions, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	logger := watermill.NopLogger{}
	pub, err := transport.OpenPublisher(ctx, o.url, transport.WithLogger(logger))
	if err != nil {
		return err
	}
	defer pub.Close()
	sub, err := transport.OpenSubscriber(ctx, o.subURL, transport.WithLogger(logger))
	if err != nil {
		return err
	}
	defer sub.Close()

	st := &demoStats{seen: map[string]bool{}, maxAttempts: demoMaxAttempts(o.subURL)}

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
	done := make(chan struct{})
	var doneOnce sync.Once
	// settled records a message's outcome; the first one counts, a later
	// one is a duplicate (a broker may deliver a message again: SQS
	// standard queues at least once, and an SQS queue without a
	// dead-letter queue hands a dead letter back).
	settled := func(uuid string, deadLettered bool) {
		st.mu.Lock()
		first := !st.seen[uuid]
		st.seen[uuid] = true
		n := len(st.seen)
		st.mu.Unlock()
		switch {
		case !first:
			st.duplicates.Add(1)
		case deadLettered:
			st.deadLettered.Add(1)
		default:
			st.handled.Add(1)
		}
		if n >= o.messages {
			doneOnce.Do(func() { close(done) })
		}
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
		return nil
	}))
	routerErr := make(chan error, 1)
	go func() { routerErr <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-routerErr:
		_ = router.Close() // stops the router's own watcher goroutine
		return err
	}

	if healthURL != "" {
		fmt.Fprintf(stdout, "health: %s  (try: berth health --addr %s)\n", healthURL, strings.TrimSuffix(healthURL, "/healthz"))
	}
	start := time.Now()
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		tick := time.NewTicker(time.Duration(float64(time.Second) / o.rate))
		defer tick.Stop()
		for i := 0; i < o.messages; i++ {
			select {
			case <-ctx.Done():
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
			_ = pub.Publish(o.topic+"_audit", a)
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
	var result error
loop:
	for {
		select {
		case <-done:
			break loop
		case <-ctx.Done():
			result = fmt.Errorf("demo did not finish: %w", ctx.Err())
			break loop
		case <-progress.C:
			printProgress(stdout, st, states(), time.Since(start))
		}
	}
	elapsed := time.Since(start)
	cancel()
	<-pubDone
	final := states()
	// Closing the router starts closing the audit batching.Subscriber,
	// which hands its open batch to the router before the subscription
	// ends; its own Close waits until that is done.
	_ = router.Close()
	<-routerErr
	_ = audit.Close()
	printProgress(stdout, st, final, elapsed)
	printSummary(stdout, o, st, final, elapsed, healthURL)
	return result
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

func printSummary(w io.Writer, o demoOptions, st *demoStats, ls []transport.ListenerState, elapsed time.Duration, healthURL string) {
	t := totals(ls)
	rebuilds := int64(0)
	for _, l := range ls {
		rebuilds += l.Rebuilds
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSummary\t")
	fmt.Fprintf(tw, "transport\t%s\n", redact(o.subURL))
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
	fmt.Fprintf(tw, "lost\t%d\n", st.published.Load()-st.handled.Load()-st.deadLettered.Load())
	fmt.Fprintf(tw, "audit batches\t%d (%d events)\n", st.batches.Load(), st.batched.Load())
	fmt.Fprintf(tw, "throughput\t%.1f msg/s\n", float64(st.handled.Load())/max(elapsed.Seconds(), 1e-9))
	fmt.Fprintf(tw, "listeners\t%d (latched %d, faulted %d, rebuilds %d)\n", len(ls), t.latched, t.faults, rebuilds)
	if healthURL != "" {
		fmt.Fprintf(tw, "health endpoint\t%s\n", healthURL)
	}
	fmt.Fprintf(tw, "elapsed\t%s\n", elapsed.Round(time.Millisecond))
	_ = tw.Flush()
}

func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return raw
}
