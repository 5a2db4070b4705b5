package batching_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/mem"
)

// batchesRun is one run of a Subscriber and HandlerFunc in a Watermill
// router over GoChannel, whose messages get a tracker as a Berth receiver
// attaches it. Their contexts are detached from GoChannel's subscription,
// which cancels them as soon as the router closes: a Berth subscriber
// keeps them live while it drains (DrainTimeout).
type batchesRun struct {
	*gochannelRun
	sub   *batching.Subscriber
	calls atomic.Int64 // router handler calls: one per batch (and retry)
}

func startBatches(t *testing.T, cfg batching.Config, fn batching.BatchFunc, mws ...message.HandlerMiddleware) *batchesRun {
	t.Helper()
	r := &batchesRun{gochannelRun: newGochannelRun(t)}
	tracked, err := message.MessageTransformSubscriberDecorator(r.track(true))(r.pubSub)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Clock == nil {
		cfg.Clock = r.clock
	}
	if r.sub, err = batching.NewSubscriber(tracked, cfg); err != nil {
		t.Fatal(err)
	}
	h := r.router.AddConsumerHandler("batch", "topic", r.sub, batching.HandlerFunc(fn))
	count := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			r.calls.Add(1)
			return h(msg)
		}
	}
	h.AddMiddleware(append(mws, count)...)
	r.run()
	return r
}

// stop closes the router, which closes the Subscriber and through it
// GoChannel, and waits for the Subscriber's Close.
func (r *batchesRun) stop(t *testing.T) {
	t.Helper()
	r.stopRouter(t)
	if err := r.sub.Close(); err != nil { // started by the router; waits for it
		t.Fatal(err)
	}
}

func payloads(n int, name func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = name(i)
	}
	return out
}

// TestSubscriberBatchesBySize: 100 messages make ten batches of ten, each
// one router handler call; every member is acked once, after its batch
// ran, and the pending count covers a full batch and returns to zero.
func TestSubscriberBatchesBySize(t *testing.T) {
	var (
		mu    sync.Mutex
		sizes []int
	)
	r := startBatches(t, batching.Config{MaxSize: 10}, func(ctx context.Context, msgs []*message.Message) error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(msgs))
		for _, m := range msgs {
			if o := outcome(m); o != "none" {
				t.Errorf("%s already %s inside its batch", m.Payload, o)
			}
		}
		return nil
	})
	want := payloads(100, func(i int) string { return fmt.Sprint(i) })
	r.publish(t, want...)
	eventually(t, "100 deliveries, each settled", func() bool { return r.settled(100) })
	r.stop(t)

	if fmt.Sprint(sizes) != fmt.Sprint(slices.Repeat([]int{10}, 10)) {
		t.Errorf("batch sizes = %v, want 10 × 10", sizes)
	}
	if n := r.calls.Load(); n != 10 {
		t.Errorf("%d router handler calls, want 10 (one per batch)", n)
	}
	acks, nacks := r.outcomes()
	for _, p := range want {
		if acks[p] != 1 || nacks[p] != 0 {
			t.Errorf("%s: %d acks, %d nacks, want 1 and 0", p, acks[p], nacks[p])
		}
	}
	if got := r.pending.Load(); got != 0 {
		t.Errorf("pending = %d after the run, want 0", got)
	}
	if p := r.peak.Load(); p < 10 {
		t.Errorf("peak pending = %d, want ≥ 10 (a full batch is counted)", p)
	}
}

// failFirstAttempt fails, through a PartialError, the members whose payload
// starts with "bad" on their first attempt, and counts handlings.
type failFirstAttempt struct {
	mu       sync.Mutex
	attempts map[string]int
	handled  map[string]int
	retried  [][]string // batches in which every member had been tried before
}

func (f *failFirstAttempt) fn(ctx context.Context, msgs []*message.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.attempts == nil {
		f.attempts, f.handled = map[string]int{}, map[string]int{}
	}
	pe := &batching.PartialError{Failed: map[int]error{}}
	again := true
	var ps []string
	for i, m := range msgs {
		p := string(m.Payload)
		ps = append(ps, p)
		f.attempts[p]++
		again = again && f.attempts[p] > 1
		if strings.HasPrefix(p, "bad") && f.attempts[p] == 1 {
			pe.Failed[i] = errors.New("first attempt")
			continue
		}
		f.handled[p]++
	}
	if again {
		f.retried = append(f.retried, ps)
	}
	if len(pe.Failed) == 0 {
		return nil
	}
	return pe
}

// TestSubscriberPartialFailureWithRetry: under a Retry middleware the
// router calls the BatchFunc again with only the members that failed, so
// every member is handled once and acked once, none nacked.
func TestSubscriberPartialFailureWithRetry(t *testing.T) {
	f := &failFirstAttempt{}
	r := startBatches(t, batching.Config{MaxSize: 10}, f.fn, middleware.Retry{MaxRetries: 1}.Middleware)
	want := payloads(100, func(i int) string {
		if i%10 == 3 || i%10 == 7 {
			return fmt.Sprint("bad", i)
		}
		return fmt.Sprint("ok", i)
	})
	r.publish(t, want...)
	eventually(t, "100 deliveries, each settled", func() bool { return r.settled(100) })
	r.stop(t)

	acks, nacks := r.outcomes()
	for _, p := range want {
		if f.handled[p] != 1 || acks[p] != 1 || nacks[p] != 0 {
			t.Errorf("%s: handled %d, %d acks, %d nacks; want 1, 1, 0", p, f.handled[p], acks[p], nacks[p])
		}
	}
	// GoChannel does not keep the order, so a batch holds any number of
	// bad members; the retries hold all 20 and nothing else.
	retried := 0
	for _, b := range f.retried {
		for _, p := range b {
			if !strings.HasPrefix(p, "bad") {
				t.Errorf("retried batch %v holds a member that succeeded", b)
			}
			retried++
		}
	}
	if retried != 20 {
		t.Errorf("%d members retried, want the 20 bad ones", retried)
	}
	if got := r.pending.Load(); got != 0 {
		t.Errorf("pending = %d after the run, want 0", got)
	}
}

// TestSubscriberPartialFailureNacks: without a retry, the router nacks the
// batch; the members named by the PartialError are nacked, the others
// acked. GoChannel redelivers the nacked ones, which then succeed. Partial
// batches end by MaxWait (the fake clock is moved on while unsettled).
func TestSubscriberPartialFailureNacks(t *testing.T) {
	f := &failFirstAttempt{}
	r := startBatches(t, batching.Config{MaxSize: 10}, f.fn)
	want := payloads(100, func(i int) string {
		if i%10 == 0 {
			return fmt.Sprint("bad", i)
		}
		return fmt.Sprint("ok", i)
	})
	r.publish(t, want...)
	eventually(t, "110 deliveries, each settled", func() bool {
		if r.settled(110) {
			return true
		}
		r.clock.Advance(time.Hour)
		return false
	})
	r.stop(t)

	acks, nacks := r.outcomes()
	for _, p := range want {
		wantNacks := 0
		if strings.HasPrefix(p, "bad") {
			wantNacks = 1
		}
		if f.handled[p] != 1 || acks[p] != 1 || nacks[p] != wantNacks {
			t.Errorf("%s: handled %d, %d acks, %d nacks; want 1, 1, %d", p, f.handled[p], acks[p], nacks[p], wantNacks)
		}
	}
	if got := r.pending.Load(); got != 0 {
		t.Errorf("pending = %d after the run, want 0", got)
	}
}

// TestSubscriberWholeFailureAndMiddlewareNack: a BatchFunc error nacks every
// member of the batch; a middleware that fails a batch the BatchFunc
// succeeded on nacks every member too (ErrBatchNacked): nothing is acked
// that the router did not ack. GoChannel redelivers; the second batch
// succeeds.
func TestSubscriberWholeFailureAndMiddlewareNack(t *testing.T) {
	for _, by := range []string{"func", "middleware"} {
		t.Run(by, func(t *testing.T) {
			var calls atomic.Int64
			fn := func(ctx context.Context, msgs []*message.Message) error {
				if calls.Add(1) == 1 && by == "func" {
					return errors.New("boom")
				}
				return nil
			}
			var failed atomic.Bool
			failOnce := func(h message.HandlerFunc) message.HandlerFunc {
				return func(msg *message.Message) ([]*message.Message, error) {
					out, err := h(msg)
					if err == nil && by == "middleware" && failed.CompareAndSwap(false, true) {
						return nil, errors.New("middleware failed the batch")
					}
					return out, err
				}
			}
			r := startBatches(t, batching.Config{MaxSize: 5}, fn, failOnce)
			want := payloads(5, func(i int) string { return fmt.Sprint(i) })
			r.publish(t, want...)
			eventually(t, "10 deliveries, each settled", func() bool { return r.settled(10) })
			r.stop(t)
			acks, nacks := r.outcomes()
			for _, p := range want {
				if acks[p] != 1 || nacks[p] != 1 {
					t.Errorf("%s: %d acks, %d nacks; want 1 and 1", p, acks[p], nacks[p])
				}
			}
			if got := r.pending.Load(); got != 0 {
				t.Errorf("pending = %d after the run, want 0", got)
			}
		})
	}
}

// TestSubscriberCloseFlushesOpenBatch: closing the router with a batch
// open (its MaxWait far away) hands that batch to the router before the
// subscription ends; its members are handled and acked once, and Close
// returns with every goroutine stopped.
func TestSubscriberCloseFlushesOpenBatch(t *testing.T) {
	rec := &recorder{}
	r := startBatches(t, batching.Config{MaxSize: 100}, rec.fn)
	want := payloads(5, func(i int) string { return fmt.Sprint(i) })
	r.publish(t, want...)
	eventually(t, "five members held", func() bool { return r.pending.Load() == 5 })
	r.stop(t)

	got := rec.Batches()
	if len(got) == 1 {
		slices.Sort(got[0]) // GoChannel does not keep the order
	}
	if len(got) != 1 || fmt.Sprint(got[0]) != fmt.Sprint(want) {
		t.Fatalf("batches = %v, want one batch %v", got, want)
	}
	acks, nacks := r.outcomes()
	for _, p := range want {
		if acks[p] != 1 || nacks[p] != 0 {
			t.Errorf("%s: %d acks, %d nacks; want 1 and 0", p, acks[p], nacks[p])
		}
	}
	if got := r.pending.Load(); got != 0 {
		t.Errorf("pending = %d after close, want 0", got)
	}
}

// TestSubscriberHandlerFuncOnPlainMessage: HandlerFunc given a message that
// is not a batch handles it as a batch of one, and a panic is an error.
func TestSubscriberHandlerFuncOnPlainMessage(t *testing.T) {
	var got []int
	h := batching.HandlerFunc(func(ctx context.Context, msgs []*message.Message) error {
		got = append(got, len(msgs))
		if string(msgs[0].Payload) == "panic" {
			panic("boom")
		}
		return nil
	})
	if err := h(localMsg("x")); err != nil {
		t.Fatal(err)
	}
	if err := h(localMsg("panic")); err == nil || !strings.Contains(err.Error(), "panicked: boom") {
		t.Fatalf("panic returned %v, want an error naming it", err)
	}
	if fmt.Sprint(got) != "[1 1]" {
		t.Fatalf("batch sizes %v, want [1 1]", got)
	}
}

// TestNewSubscriberBadInput: a nil subscriber or an invalid Config is
// rejected at construction, naming what is wrong.
func TestNewSubscriberBadInput(t *testing.T) {
	if _, err := batching.NewSubscriber(nil, batching.Config{}); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("nil subscriber: %v, want ErrInvalidConfig", err)
	}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer pubSub.Close()
	_, err := batching.NewSubscriber(pubSub, batching.Config{MaxSize: -1})
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "MaxSize") {
		t.Errorf("MaxSize -1: %v, want ErrInvalidConfig naming MaxSize", err)
	}
	s, err := batching.NewSubscriber(pubSub, batching.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Subscribe(context.Background(), "topic"); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	if got := s.ListenerStates(); got != nil {
		t.Errorf("ListenerStates over GoChannel = %v, want nil", got)
	}
}

// TestSubscriberReportsListenerStates: over a Berth subscriber, the
// Subscriber reports its listeners, so package health can take it.
func TestSubscriberReportsListenerStates(t *testing.T) {
	broker := mem.NewBroker()
	inner, err := mem.NewSubscriber(mem.SubscriberConfig{Broker: broker}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := batching.NewSubscriber(inner, batching.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Subscribe(context.Background(), "topic"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "one listener", func() bool { return len(s.ListenerStates()) == 1 })
	if got, want := s.ListenerStates()[0].Name, inner.ListenerStates()[0].Name; got != want {
		t.Errorf("listener %q, want %q", got, want)
	}
}

// TestSubscriberCloseFlushesOverBerth: over a Berth subscriber, closing the
// router with a batch open (the router cancels the subscription as it
// closes) still hands that batch to the router: every member is handled
// once and acked at the broker, nothing is left leased or ready.
func TestSubscriberCloseFlushesOverBerth(t *testing.T) {
	broker := mem.NewBroker()
	topic := "flush-" + watermill.NewShortUUID()
	broker.Ensure(topic, "")
	inner, err := mem.NewSubscriber(mem.SubscriberConfig{Broker: broker}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := batching.NewSubscriber(inner, batching.Config{MaxSize: 100, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddConsumerHandler("batch", topic, sub, batching.HandlerFunc(rec.fn))
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(context.Background()) }()
	<-router.Running()

	want := payloads(7, func(i int) string { return fmt.Sprint(i) })
	for _, p := range want {
		broker.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(p)))
	}
	eventually(t, "seven members held", func() bool {
		ls := sub.ListenerStates()
		return len(ls) == 1 && ls[0].BatchPending == 7
	})
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	// The router's Close starts the Subscriber's and may return first;
	// this one waits until the wrapped subscriber has settled everything.
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	got := rec.Batches()
	if len(got) != 1 {
		t.Fatalf("batches = %v, want one", got)
	}
	slices.Sort(got[0])
	if fmt.Sprint(got[0]) != fmt.Sprint(want) {
		t.Fatalf("batch = %v, want %v", got[0], want)
	}
	if st := broker.Stats(topic, ""); st != (mem.Stats{}) {
		t.Errorf("broker %+v after close, want everything acked", st)
	}
}
