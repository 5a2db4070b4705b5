// Package transporttest is the conformance kit every Berth transport runs:
// Watermill's universal suite (tests.TestPubSub, full size) plus Berth's own
// behaviours (nack redelivery with attempt counts, dead-lettering after
// MaxAttempts, nothing lost on close, QueueCount and status, the un-acked
// limit). A transport's test calls Run with constructors over a real broker.
//
// # Using it
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Config{ ... })
//	}
package transporttest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// DeadLetter is what a transport's dead-letter destination says of one
// message.
type DeadLetter struct {
	UUID   string
	Reason string
}

// Config holds a transport's constructors. Every constructor creates
// publishers and subscribers over the same broker, and registers their
// closing with t.Cleanup where the suite does not close them itself.
type Config struct {
	// Features are the honest Watermill features of the transport.
	Features tests.Features

	// NewPubSub builds a publisher and a subscriber (Watermill's suite).
	NewPubSub tests.PubSubConstructor
	// NewConsumerGroupPubSub builds them for a consumer group; nil when
	// consumer groups are not supported.
	NewConsumerGroupPubSub tests.ConsumerGroupPubSubConstructor

	// NewPubSubWith builds them with the given pipeline configuration
	// (Berth's behaviours tune attempts, delays and limits). The subscriber
	// must be a *receiver.Subscriber (or wrap one and expose Listeners).
	NewPubSubWith func(t *testing.T, p receiver.Config) (message.Publisher, message.Subscriber)

	// DeadLetters lists the dead-lettered messages of topic.
	DeadLetters func(t *testing.T, topic string) []DeadLetter

	// SkipWatermill skips Watermill's suite (for a quick run of Berth's).
	SkipWatermill bool

	// Unordered: the transport does not deliver in publish order (SQS
	// standard queues), so the cases of strict order with Concurrency 1
	// (InPlaceRetryKeepsOrder, InPlaceDeadLetterKeepsOrder) are skipped.
	Unordered bool

	// WholeSecondRetries: the broker delays a retry by whole seconds (SQS
	// visibility timeouts round 50ms up to 1s), so RetryHandledWhenDue,
	// which retries after 50ms, is skipped.
	WholeSecondRetries bool
}

// Run runs the whole kit.
func Run(t *testing.T, c Config) {
	if !c.SkipWatermill {
		t.Run("Watermill", func(t *testing.T) {
			tests.TestPubSub(t, c.Features, c.NewPubSub, c.NewConsumerGroupPubSub)
		})
	}
	t.Run("Berth", func(t *testing.T) { RunBerth(t, c) })
}

// RunBerth runs Berth's own behaviours only.
func RunBerth(t *testing.T, c Config) {
	if c.NewPubSubWith == nil {
		t.Fatal("transporttest: Config.NewPubSubWith is required")
	}
	t.Run("NackRedeliversWithAttempt", func(t *testing.T) { t.Parallel(); testNackRedelivers(t, c) })
	t.Run("DeadLetterAfterMaxAttempts", func(t *testing.T) { t.Parallel(); testDeadLetter(t, c) })
	t.Run("CloseLosesNothing", func(t *testing.T) { t.Parallel(); testCloseLosesNothing(t, c) })
	t.Run("QueueCountAndStatus", func(t *testing.T) { t.Parallel(); testQueueCountAndStatus(t, c) })
	t.Run("UnackedLimit", func(t *testing.T) { t.Parallel(); testUnackedLimit(t, c) })
	t.Run("RetryHandledWhenDue", func(t *testing.T) { t.Parallel(); testRetryWhenDue(t, c) })
	t.Run("InPlaceRetryKeepsOrder", func(t *testing.T) { t.Parallel(); testInPlaceOrder(t, c) })
	t.Run("InPlaceDeadLetterKeepsOrder", func(t *testing.T) { t.Parallel(); testInPlaceDeadLetter(t, c) })
	t.Run("InPlaceRetryHandedBackOnClose", func(t *testing.T) { t.Parallel(); testInPlaceClose(t, c) })
}

const waitFor = 30 * time.Second

func topic(t *testing.T) string { return "berth_" + watermill.NewShortUUID() }

// initialize creates the topic's queue ahead of publishing, for transports
// that drop messages published before anything subscribed (SNS fan-out).
func initialize(t *testing.T, sub message.Subscriber, topic string) {
	t.Helper()
	if si, ok := sub.(message.SubscribeInitializer); ok {
		if err := si.SubscribeInitialize(topic); err != nil {
			t.Fatalf("SubscribeInitialize: %v", err)
		}
	}
}

func publish(t *testing.T, pub message.Publisher, topic string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		ids[i] = watermill.NewUUID()
		msgs[i] = message.NewMessage(ids[i], []byte(strconv.Itoa(i)))
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
	return ids
}

func subscribe(t *testing.T, sub message.Subscriber, topic string) (<-chan *message.Message, context.CancelFunc) {
	t.Helper()
	return subscribeCtx(t, context.Background(), sub, topic)
}

func subscribeCtx(t *testing.T, parent context.Context, sub message.Subscriber, topic string) (<-chan *message.Message, context.CancelFunc) {
	t.Helper()
	if si, ok := sub.(message.SubscribeInitializer); ok {
		if err := si.SubscribeInitialize(topic); err != nil {
			t.Fatalf("SubscribeInitialize: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(parent)
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		t.Fatalf("subscribe: %v", err)
	}
	return ch, cancel
}

func receive(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return m
	case <-time.After(waitFor):
		t.Fatal("no message within " + waitFor.String())
	}
	return nil
}

func closeAll(t *testing.T, pub message.Publisher, sub message.Subscriber) {
	t.Helper()
	if err := pub.Close(); err != nil {
		t.Errorf("publisher close: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("subscriber close: %v", err)
	}
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %s", waitFor, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

func listener(t *testing.T, sub message.Subscriber) *receiver.Listener {
	t.Helper()
	ls, ok := sub.(interface{ Listeners() []*receiver.Listener })
	if !ok {
		t.Fatalf("subscriber %T does not expose Listeners()", sub)
	}
	var l *receiver.Listener
	eventually(t, "one listener", func() bool {
		all := ls.Listeners()
		if len(all) == 1 {
			l = all[0]
			return true
		}
		return false
	})
	return l
}

func fastRetry(p receiver.Config) receiver.Config {
	p.RetryDelay = time.Millisecond
	p.MaxRetryDelay = 10 * time.Millisecond
	p.EmptyDelay = 20 * time.Millisecond
	p.DrainTimeout = time.Second
	return p
}

func testNackRedelivers(t *testing.T, c Config) {
	pub, sub := c.NewPubSubWith(t, fastRetry(receiver.Config{Concurrency: 1}))
	defer closeAll(t, pub, sub)
	tp := topic(t)
	initialize(t, sub, tp)
	ch, cancel := subscribe(t, sub, tp)
	defer cancel()
	ids := publish(t, pub, tp, 1)
	for want := 1; want <= 3; want++ {
		m := receive(t, ch)
		if m.UUID != ids[0] {
			t.Fatalf("got %s, want %s", m.UUID, ids[0])
		}
		if got := m.Metadata.Get(transport.MetadataAttempt); got != strconv.Itoa(want) {
			t.Fatalf("attempt metadata = %q, want %d", got, want)
		}
		if want < 3 {
			m.Nack()
		} else {
			m.Ack()
		}
	}
}

func testDeadLetter(t *testing.T, c Config) {
	if c.DeadLetters == nil {
		t.Skip("transport exposes no dead-letter listing")
	}
	const maxAttempts = 3
	pub, sub := c.NewPubSubWith(t, fastRetry(receiver.Config{Concurrency: 1, MaxAttempts: maxAttempts}))
	defer closeAll(t, pub, sub)
	tp := topic(t)
	initialize(t, sub, tp)
	ch, cancel := subscribe(t, sub, tp)
	defer cancel()
	poison := publish(t, pub, tp, 1)[0]
	for i := 1; i <= maxAttempts; i++ {
		m := receive(t, ch)
		if m.UUID != poison {
			t.Fatalf("got %s, want the poison message", m.UUID)
		}
		m.Nack()
	}
	eventually(t, "poison message dead-lettered", func() bool {
		for _, d := range c.DeadLetters(t, tp) {
			if d.UUID == poison {
				if d.Reason == "" {
					t.Fatal("dead letter has no reason")
				}
				return true
			}
		}
		return false
	})
	// Never redelivered: the next message is the sentinel published after.
	sentinel := publish(t, pub, tp, 1)[0]
	m := receive(t, ch)
	if m.UUID != sentinel {
		t.Fatalf("got %s after dead-lettering, want the sentinel %s", m.UUID, sentinel)
	}
	m.Ack()
}

func testCloseLosesNothing(t *testing.T, c Config) {
	const n = 60
	cfg := fastRetry(receiver.Config{Concurrency: 4, BufferSize: 8})
	pub, sub := c.NewPubSubWith(t, cfg)
	tp := topic(t)
	initialize(t, sub, tp)
	ids := publish(t, pub, tp, n)
	seen := map[string]bool{}
	ch, cancel := subscribe(t, sub, tp)
	// Ack ten, hold four un-acked, then close with a full buffer.
	for range 10 {
		m := receive(t, ch)
		seen[m.UUID] = true
		m.Ack()
	}
	for range 4 {
		m := receive(t, ch)
		_ = m // never acked: handed back when the drain deadline passes
	}
	cancel()
	closeAll(t, pub, sub)

	pub2, sub2 := c.NewPubSubWith(t, cfg)
	defer closeAll(t, pub2, sub2)
	ch2, cancel2 := subscribe(t, sub2, tp)
	defer cancel2()
	for len(seen) < n {
		m := receive(t, ch2)
		seen[m.UUID] = true
		m.Ack()
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("message %s lost", id)
		}
	}
}

func testQueueCountAndStatus(t *testing.T, c Config) {
	cfg := fastRetry(receiver.Config{Concurrency: 2, BufferSize: 4})
	pub, sub := c.NewPubSubWith(t, cfg)
	defer closeAll(t, pub, sub)
	tp := topic(t)
	initialize(t, sub, tp)
	publish(t, pub, tp, 20)
	ch, cancel := subscribe(t, sub, tp)
	defer cancel()
	l := listener(t, sub)
	// Nobody reads: both permits are taken by messages waiting to be
	// delivered, and the buffer fills.
	eventually(t, "QueueCount reaches buffer + concurrency (6)", func() bool { return l.QueueCount() == 6 })
	if s := l.State(); s.Status != transport.StatusAccepting || s.Buffered != 4 || s.InFlight != 2 {
		t.Fatalf("state = %+v, want accepting with 4 buffered and 2 in flight", s)
	}
	if err := l.Pause(context.Background()); err != nil {
		t.Fatalf("pause: %v", err)
	}
	eventually(t, "paused listener released its buffer", func() bool {
		s := l.State()
		return s.Status == transport.StatusPaused && s.Buffered == 0 && s.QueueCount == s.InFlight
	})
	l.Resume()
	got := map[string]bool{}
	for len(got) < 20 {
		m := receive(t, ch)
		got[m.UUID] = true
		m.Ack()
	}
	eventually(t, "QueueCount back to 0 and accepting", func() bool {
		s := l.State()
		return s.QueueCount == 0 && s.Status == transport.StatusAccepting
	})
	cancel()
	<-l.Closed()
	if s := l.State(); s.Status != transport.StatusStopped {
		t.Fatalf("status after close = %s, want stopped", s.Status)
	}
}

func testUnackedLimit(t *testing.T, c Config) {
	const limit = 3
	cfg := fastRetry(receiver.Config{Concurrency: limit, BufferSize: 5})
	pub, sub := c.NewPubSubWith(t, cfg)
	defer closeAll(t, pub, sub)
	tp := topic(t)
	initialize(t, sub, tp)
	publish(t, pub, tp, 30)
	ch, cancel := subscribe(t, sub, tp)
	defer cancel()
	l := listener(t, sub)
	total := 0
	for round := 0; total < 30; round++ {
		var held []*message.Message
		for len(held) < limit && total+len(held) < 30 {
			held = append(held, receive(t, ch))
		}
		if total+len(held) < 30 {
			// Every permit is held: with the buffer full, nothing more can
			// be delivered until something is settled.
			eventually(t, "buffer full while permits are held", func() bool {
				s := l.State()
				return s.InFlight == limit && (s.Buffered == 5 || total+limit+s.Buffered == 30)
			})
			select {
			case m := <-ch:
				t.Fatalf("round %d: message %s delivered beyond the un-acked limit %d", round, m.UUID, limit)
			default:
			}
		}
		for _, m := range held {
			m.Ack()
		}
		total += len(held)
	}
	if total != 30 {
		t.Fatal(fmt.Sprint("received ", total))
	}
}

// testRetryWhenDue: on an idle queue (the loop waits its empty delay, 1s
// by default), a nacked message is handled again when its retry falls due
// (50ms), not at the loop's next poll.
func testRetryWhenDue(t *testing.T, c Config) {
	if c.WholeSecondRetries {
		t.Skip("the broker delays retries by whole seconds")
	}
	const retry = 50 * time.Millisecond
	pub, sub := c.NewPubSubWith(t, receiver.Config{RetryDelay: retry, MaxRetryDelay: retry, DrainTimeout: time.Second})
	defer closeAll(t, pub, sub)
	tp := topic(t)
	initialize(t, sub, tp)
	ch, cancel := subscribe(t, sub, tp)
	defer cancel()
	id := publish(t, pub, tp, 1)[0]
	var last time.Time
	for attempt := 1; attempt <= 4; attempt++ {
		m := receive(t, ch)
		now := time.Now()
		if m.UUID != id {
			t.Fatalf("got %s, want %s", m.UUID, id)
		}
		if attempt > 1 {
			// Generous for a loaded CI machine; polling took 1s (the
			// empty delay) per retry.
			gap := now.Sub(last)
			t.Logf("attempt %d: %s after the nack of attempt %d", attempt, gap, attempt-1)
			if gap >= 400*time.Millisecond {
				t.Fatalf("attempt %d came %s after the nack, want about %s (the retry delay)", attempt, gap, retry)
			}
		}
		last = time.Now()
		if attempt < 4 {
			m.Nack()
		} else {
			m.Ack()
		}
	}
}

// orderedRun publishes n messages (payloads 0..n-1) before subscribing with
// Concurrency 1, hands each delivery to handle (which acks or nacks it),
// and returns the payloads in the order delivered, until handle reports
// done, and the topic.
func orderedRun(t *testing.T, c Config, p receiver.Config, n int, handle func(m *message.Message, payload int) (done bool)) ([]int, string) {
	t.Helper()
	if c.Unordered {
		t.Skip("the transport does not deliver in publish order")
	}
	pub, sub := c.NewPubSubWith(t, p)
	defer closeAll(t, pub, sub)
	tp := topic(t)
	initialize(t, sub, tp)
	publish(t, pub, tp, n)
	ch, cancel := subscribe(t, sub, tp)
	defer cancel()
	var got []int
	for {
		m := receive(t, ch)
		v, err := strconv.Atoi(string(m.Payload))
		if err != nil {
			t.Fatalf("payload %q: %v", m.Payload, err)
		}
		got = append(got, v)
		if handle(m, v) {
			return got, tp
		}
	}
}

// testInPlaceOrder: with Concurrency 1, a message nacked once is handled
// again before any later message, with its attempt counted.
func testInPlaceOrder(t *testing.T, c Config) {
	const n = 30
	failed := map[int]bool{}
	acked := 0
	got, _ := orderedRun(t, c, fastRetry(receiver.Config{Concurrency: 1}), n, func(m *message.Message, v int) bool {
		attempt := m.Metadata.Get(transport.MetadataAttempt)
		if (v == 4 || v == 14 || v == 24) && !failed[v] {
			failed[v] = true
			if attempt != "1" {
				t.Errorf("message %d: first attempt %s, want 1", v, attempt)
			}
			m.Nack()
			return false
		}
		if failed[v] && attempt != "2" {
			t.Errorf("message %d: attempt after one nack is %s, want 2", v, attempt)
		}
		m.Ack()
		acked++
		return acked == n
	})
	var want []int
	for v := range n {
		want = append(want, v)
		if v == 4 || v == 14 || v == 24 {
			want = append(want, v)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handled in order\n%v\nwant\n%v", got, want)
	}
}

// testInPlaceDeadLetter: with Concurrency 1, a message failing every
// attempt is retried in place and dead-lettered after MaxAttempts; the
// messages after it follow in order.
func testInPlaceDeadLetter(t *testing.T, c Config) {
	const n, poison, maxAttempts = 6, 2, 3
	var poisonID string
	acked := 0
	got, tp := orderedRun(t, c, fastRetry(receiver.Config{Concurrency: 1, MaxAttempts: maxAttempts}), n, func(m *message.Message, v int) bool {
		if v == poison {
			poisonID = m.UUID
			m.Nack()
			return false
		}
		m.Ack()
		acked++
		return acked == n-1
	})
	want := []int{0, 1, 2, 2, 2, 3, 4, 5}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handled in order %v, want %v", got, want)
	}
	if c.DeadLetters == nil {
		return
	}
	eventually(t, "the poison message dead-lettered", func() bool {
		for _, d := range c.DeadLetters(t, tp) {
			if d.UUID == poisonID {
				return true
			}
		}
		return false
	})
}

// testInPlaceClose: a message waiting for its in-place retry when the
// subscriber closes is handed back at once, and redelivered to the next
// subscriber with everything else.
func testInPlaceClose(t *testing.T, c Config) {
	const n = 3
	cfg := fastRetry(receiver.Config{Concurrency: 1})
	cfg.RetryDelay, cfg.MaxRetryDelay = time.Hour, time.Hour
	cfg.DrainTimeout = 10 * time.Second
	pub, sub := c.NewPubSubWith(t, cfg)
	tp := topic(t)
	initialize(t, sub, tp)
	ids := publish(t, pub, tp, n)
	ch, cancel := subscribe(t, sub, tp)
	m := receive(t, ch)
	m.Nack() // waits an hour in place
	l := listener(t, sub)
	eventually(t, "the nacked message waits in place, holding the only permit", func() bool {
		s := l.State()
		return s.InFlight == 1
	})
	cancel()
	start := time.Now()
	closeAll(t, pub, sub)
	if took := time.Since(start); took >= cfg.DrainTimeout {
		t.Fatalf("Close took %s: the message waiting in place was not handed back at once", took)
	}

	pub2, sub2 := c.NewPubSubWith(t, fastRetry(receiver.Config{Concurrency: 1}))
	defer closeAll(t, pub2, sub2)
	ch2, cancel2 := subscribe(t, sub2, tp)
	defer cancel2()
	seen := map[string]bool{}
	for len(seen) < n {
		m := receive(t, ch2)
		seen[m.UUID] = true
		m.Ack()
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("message %s lost", id)
		}
	}
}
