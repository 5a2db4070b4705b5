package receiver_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/transporttest"
)

func newSubscriber(t *testing.T, src transport.Source, p receiver.Config, logger watermill.LoggerAdapter) *receiver.Subscriber {
	t.Helper()
	if p.EmptyDelay == 0 {
		p.EmptyDelay = 5 * time.Millisecond
	}
	sub, err := receiver.NewSubscriber(func(context.Context, string) (transport.Source, error) { return src, nil },
		receiver.SubscriberConfig{Pipeline: p, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// A consumer that took a message and stopped reading the channel (the
// buffer behind it full) does not hold Shutdown: it returns once its
// context is done and CloseGrace has run out at most, says it gave up, and
// closes the channel.
func TestShutdownWithUnreadChannelReturnsError(t *testing.T) {
	src := &fakeSource{available: 50}
	sub := newSubscriber(t, src, receiver.Config{Concurrency: 4, CloseGrace: 50 * time.Millisecond}, nil)
	msgs, err := sub.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	held := <-msgs // never acked; nothing else is read
	eventually(t, "the buffer full behind the unread channel", func() bool {
		s := sub.ListenerStates()
		return len(s) == 1 && s[0].Buffered > 0 && s[0].InFlight == 4
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = sub.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	select {
	case <-held.Context().Done():
	default:
		t.Fatal("the held message's context was not cancelled")
	}
	for range msgs { // closed: the loop ends
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("Close after Shutdown = %v", err)
	}
}

// Close (Watermill's, with DrainTimeout) returns nil when it handed
// messages back, as Watermill's suite requires, within DrainTimeout +
// CloseGrace; Shutdown afterwards reports what the first close gave up.
func TestCloseHandsBackWithinBound(t *testing.T) {
	src := &fakeSource{available: 3}
	sub := newSubscriber(t, src, receiver.Config{Concurrency: 3, DrainTimeout: 50 * time.Millisecond, CloseGrace: 50 * time.Millisecond}, nil)
	msgs, err := sub.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	held := <-msgs // never acked
	start := time.Now()
	if err := sub.Close(); err != nil {
		t.Fatalf("Close = %v, want nil (Watermill's contract)", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %s", d)
	}
	select {
	case <-held.Context().Done():
	default:
		t.Fatal("the held message's context was not cancelled")
	}
	if err := sub.Shutdown(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown after Close = %v, want what Close gave up", err)
	}
}

// hangingSource's Retry blocks until its context is done: a broker that
// does not answer while closing hands messages back.
type hangingSource struct {
	*fakeSource
	hung atomic.Int64
}

func (s *hangingSource) Retry(ctx context.Context, _ *transport.Delivery, _ time.Duration, _ string) error {
	s.hung.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// Handing back cannot outlive CloseGrace: the calls to a broker that hangs
// are cancelled and Close returns its error.
func TestListenerCloseBoundedByGraceWhenBrokerHangs(t *testing.T) {
	src := &hangingSource{fakeSource: &fakeSource{available: 3}}
	l := newListener(t, src, receiver.Config{Concurrency: 3, CloseGrace: 20 * time.Millisecond})
	for range 3 {
		<-l.Messages() // held, never acked
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := l.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if src.hung.Load() == 0 {
		t.Fatal("nothing was handed back")
	}
	if err := l.Close(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Close = %v, want the first one's result", err)
	}
}

// After a clean drain (every message settled), Close and Shutdown return
// nil.
func TestCloseAfterCleanDrainReturnsNil(t *testing.T) {
	src := &fakeSource{available: 5}
	l := newListener(t, src, receiver.Config{Concurrency: 2})
	for range 5 {
		(<-l.Messages()).Ack()
	}
	eventually(t, "all acked", func() bool { return l.QueueCount() == 0 })
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("Listener.Close = %v", err)
	}

	src2 := &fakeSource{available: 5}
	sub := newSubscriber(t, src2, receiver.Config{Concurrency: 2}, nil)
	msgs, err := sub.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		(<-msgs).Ack()
	}
	eventually(t, "all acked", func() bool { return sub.ListenerStates()[0].QueueCount == 0 })
	if err := sub.Shutdown(context.Background()); err != nil {
		t.Fatalf("Subscriber.Shutdown = %v", err)
	}
}

// A logger and an observer that panic, through the subscriber's path: the
// process stays up, the logger's panic is recorded as a fault, the
// watchdog rebuilds, and every message is still acked.
func TestPanickingLoggerAndObserverThroughSubscriber(t *testing.T) {
	inj := transporttest.NewFaults().Error(transporttest.AtAck, 1).Panic(transporttest.AtLog, 1)
	src := &fakeSource{available: 10}
	faulty := transporttest.FaultySource(src, inj)
	p := receiver.Config{Concurrency: 2, CheckInterval: 10 * time.Millisecond, Observer: transporttest.PanickingObserver{}}
	sub := newSubscriber(t, faulty, p, transporttest.PanickingLogger(watermill.NopLogger{}, inj))
	defer sub.Close()
	msgs, err := sub.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	for len(acked) < 10 {
		m := <-msgs
		acked[m.UUID] = true
		m.Ack()
	}
	eventually(t, "the log fault recorded and rebuilt", func() bool {
		s := sub.ListenerStates()[0]
		return inj.Hits(transporttest.AtLog) == 1 && s.Rebuilds >= 1 && !s.Faulted &&
			strings.HasPrefix(s.Fault, "berth: log faulted")
	})
}
