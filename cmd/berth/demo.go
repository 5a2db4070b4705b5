package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all"
)

// The demo's embedded default is SQLite in a fresh temporary file (removed
// afterwards); --url picks any other transport.
const embeddedDefault = "sqlite (temporary file)"

type demoOptions struct {
	url      string
	messages int
	rate     float64
	fail     float64
	progress time.Duration
	timeout  time.Duration
}

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("berth demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o demoOptions
	fs.StringVar(&o.url, "url", "", "transport URL (mem://, sqlite:///path.db, postgres://, sqlserver://, sqs://); default: "+embeddedDefault)
	fs.IntVar(&o.messages, "messages", 200, "orders to publish")
	fs.Float64Var(&o.rate, "rate", 500, "orders published per second")
	fs.Float64Var(&o.fail, "fail", 0.1, "probability that the handler fails an attempt (nack and retry)")
	fs.DurationVar(&o.progress, "progress", 500*time.Millisecond, "progress line interval")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: berth demo [flags]\n\nPublishes orders, consumes them through a Watermill router with a handler\nthat fails some attempts, and prints what happened.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case o.messages < 1:
		return errors.New("--messages must be ≥ 1")
	case o.rate <= 0:
		return errors.New("--rate must be > 0")
	case o.fail < 0 || o.fail >= 1:
		return errors.New("--fail must be in [0, 1)")
	}
	if o.url == "" {
		dir, err := os.MkdirTemp("", "berth-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.url = "sqlite://" + filepath.Join(dir, "demo.db")
	}
	return runDemo(ctx, o, stdout)
}

type demoStats struct {
	published, handled, failed, duplicates atomic.Int64
	mu                                     sync.Mutex
	seen                                   map[string]bool
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
	sub, err := transport.OpenSubscriber(ctx, o.url, transport.WithLogger(logger))
	if err != nil {
		return err
	}
	defer sub.Close()

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return err
	}
	st := &demoStats{seen: map[string]bool{}}
	done := make(chan struct{})
	var doneOnce sync.Once
	router.AddConsumerHandler("orders", "orders", sub, func(m *message.Message) error {
		if rand.Float64() < o.fail {
			st.failed.Add(1)
			return fmt.Errorf("order %s: simulated failure", m.UUID)
		}
		st.mu.Lock()
		dup := st.seen[m.UUID]
		st.seen[m.UUID] = true
		n := len(st.seen)
		st.mu.Unlock()
		if dup {
			st.duplicates.Add(1)
		} else {
			st.handled.Add(1)
		}
		if n == o.messages {
			doneOnce.Do(func() { close(done) })
		}
		return nil
	})
	routerErr := make(chan error, 1)
	go func() { routerErr <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-routerErr:
		return err
	}

	start := time.Now()
	go func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / o.rate))
		defer tick.Stop()
		for i := 0; i < o.messages; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			m := message.NewMessage(watermill.NewUUID(), []byte(`{"order":`+strconv.Itoa(i)+`}`))
			if err := pub.Publish("orders", m); err != nil {
				continue
			}
			st.published.Add(1)
		}
	}()

	states := func() []transport.ListenerState {
		if s, ok := sub.(interface {
			ListenerStates() []transport.ListenerState
		}); ok {
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
	_ = router.Close()
	<-routerErr
	printProgress(stdout, st, states(), elapsed)
	printSummary(stdout, o, st, elapsed)
	return result
}

func printProgress(w io.Writer, st *demoStats, ls []transport.ListenerState, elapsed time.Duration) {
	var q, wave, latched, faults int
	for _, l := range ls {
		q += l.QueueCount
		wave = max(wave, l.Wave)
		if l.Latched {
			latched++
		}
		if l.Faulted {
			faults++
		}
	}
	rate := float64(st.handled.Load()) / max(elapsed.Seconds(), 1e-9)
	fmt.Fprintf(w, "%6.1fs  published %5d  handled %5d  %7.1f msg/s  queue %3d  wave %2d  latched %d  faulted %d  retries %d\n",
		elapsed.Seconds(), st.published.Load(), st.handled.Load(), rate, q, wave, latched, faults, st.failed.Load())
}

func printSummary(w io.Writer, o demoOptions, st *demoStats, elapsed time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSummary\t")
	fmt.Fprintf(tw, "transport\t%s\n", o.url)
	fmt.Fprintf(tw, "published\t%d\n", st.published.Load())
	fmt.Fprintf(tw, "handled\t%d\n", st.handled.Load())
	fmt.Fprintf(tw, "failed attempts (retried)\t%d\n", st.failed.Load())
	fmt.Fprintf(tw, "duplicates\t%d\n", st.duplicates.Load())
	fmt.Fprintf(tw, "lost\t%d\n", st.published.Load()-st.handled.Load())
	fmt.Fprintf(tw, "elapsed\t%s\n", elapsed.Round(time.Millisecond))
	_ = tw.Flush()
}
