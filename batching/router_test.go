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
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/receiver"
)

// routerRun is one run of a Handler in a Watermill router over GoChannel.
// The subscriber is decorated to attach a tracker to every delivered
// message, as a Berth receiver does, so the test also sees the pending count
// through the router.
type routerRun struct {
	*gochannelRun
	handler *batching.Handler
}

func startRouter(t *testing.T, cfg batching.Config, fn batching.BatchFunc) *routerRun {
	t.Helper()
	r := &routerRun{gochannelRun: newGochannelRun(t)}
	cfg.Clock = r.clock
	h, err := batching.NewHandler(cfg, fn)
	if err != nil {
		t.Fatal(err)
	}
	r.handler = h
	r.router.AddSubscriberDecorators(message.MessageTransformSubscriberDecorator(r.track(false)))
	r.router.AddConsumerHandler("batch", "topic", r.pubSub, h.Handle)
	r.run()
	return r
}

func (r *routerRun) stop(t *testing.T) {
	t.Helper()
	r.stopRouter(t)
	if err := r.handler.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.pubSub.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRouterBatchesBySize: 100 messages through the router make exactly ten
// batches of ten (no timer is involved), every message is acked once, after
// its batch, and the pending count covers a full batch and returns to zero.
func TestRouterBatchesBySize(t *testing.T) {
	var (
		mu    sync.Mutex
		sizes []int
	)
	r := startRouter(t, batching.Config{MaxSize: 10}, func(ctx context.Context, msgs []*message.Message) error {
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
	var want []string
	for i := range 100 {
		want = append(want, fmt.Sprint(i))
	}
	r.publish(t, want...)
	eventually(t, "100 deliveries, each settled", func() bool { return r.settled(100) })
	r.stop(t)

	if fmt.Sprint(sizes) != fmt.Sprint(slices.Repeat([]int{10}, 10)) {
		t.Errorf("batch sizes = %v, want 10 × 10", sizes)
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

// TestRouterPartialFailure: the "bad" members fail on their first attempt
// through a PartialError; the router nacks exactly those, GoChannel
// redelivers them and they succeed. Partial batches end by MaxWait (the
// fake clock is moved on whenever the run is not settled yet).
func TestRouterPartialFailure(t *testing.T) {
	var (
		mu       sync.Mutex
		attempts = map[string]int{}
		handled  = map[string]int{}
	)
	r := startRouter(t, batching.Config{MaxSize: 10}, func(ctx context.Context, msgs []*message.Message) error {
		mu.Lock()
		defer mu.Unlock()
		pe := &batching.PartialError{Failed: map[int]error{}}
		for i, m := range msgs {
			p := string(m.Payload)
			attempts[p]++
			if strings.HasPrefix(p, "bad") && attempts[p] == 1 {
				pe.Failed[i] = errors.New("first attempt")
				continue
			}
			handled[p]++
		}
		return pe // an empty PartialError fails no one
	})
	var want []string
	for i := range 100 {
		p := fmt.Sprint("ok", i)
		if i%10 == 0 {
			p = fmt.Sprint("bad", i)
		}
		want = append(want, p)
	}
	r.publish(t, want...)
	eventually(t, "110 deliveries, each settled", func() bool {
		if r.settled(110) {
			return true
		}
		r.clock.Advance(time.Hour) // ends whatever batch is open
		return false
	})
	r.stop(t)

	acks, nacks := r.outcomes()
	for _, p := range want {
		wantNacks := 0
		if strings.HasPrefix(p, "bad") {
			wantNacks = 1
		}
		if handled[p] != 1 || acks[p] != 1 || nacks[p] != wantNacks {
			t.Errorf("%s: handled %d, %d acks, %d nacks; want 1, 1, %d", p, handled[p], acks[p], nacks[p], wantNacks)
		}
	}
	if got := r.pending.Load(); got != 0 {
		t.Errorf("pending = %d after the run, want 0", got)
	}
}

// TestRouterCloseWithOpenBatch: closing the router while a batch is open
// ends promptly. GoChannel cancels the contexts of messages it gives up on,
// so the open members are discarded (never handled) and counted out.
//
// The router's Close can return while one last handler call it started
// late is still running (a GoChannel redelivery of a discarded member racing
// the close): Handler.Close then flushes that member. Either way no message
// is handled twice and the count returns to zero.
func TestRouterCloseWithOpenBatch(t *testing.T) {
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	defer pubSub.Close()
	pending := receiver.NewPending(nil)
	var entered atomic.Int64
	track := message.MessageTransformSubscriberDecorator(func(m *message.Message) {
		ctx, _ := receiver.NewMessageContext(m.Context(), pending, onEnter(func() { entered.Add(1) }))
		m.SetContext(ctx)
	})
	rec := &recorder{}
	h, err := batching.NewHandler(batching.Config{MaxSize: 10, Clock: newFakeClock()}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	router.AddSubscriberDecorators(track)
	router.AddConsumerHandler("batch", "topic", pubSub, h.Handle)
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(context.Background()) }()
	<-router.Running()
	for i := range 5 {
		if err := pubSub.Publish("topic", message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "five members", func() bool { return entered.Load() == 5 })
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := pending.Load(); got != 0 {
		t.Fatalf("pending = %d, want 0", got)
	}
	seen := map[string]bool{}
	for _, b := range rec.Batches() {
		for _, p := range b {
			if seen[p] {
				t.Errorf("%s handled twice", p)
			}
			seen[p] = true
		}
	}
	if len(seen) == 5 {
		t.Errorf("all five handled: the open batch was not discarded on close")
	}
}
