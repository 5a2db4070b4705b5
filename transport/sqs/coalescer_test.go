package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/transport"
)

// fakeSender is the publisher's side of the SQS API: one queue, every
// SendMessageBatch and SendMessage recorded. Bodies starting with "bad" fail
// as a sender fault; bodies starting with "flaky" fail once on the server
// side. A SendMessageBatch holding a body in hold waits until its channel
// is closed; while gate is set, every one waits for it to be closed.
type fakeSender struct {
	API  // unused methods panic
	fifo bool

	mu       sync.Mutex
	gate     chan struct{}
	hold     map[string]chan struct{}
	batches  [][]types.SendMessageBatchRequestEntry
	singles  int
	sent     []types.SendMessageBatchRequestEntry // accepted, in order
	running  int
	peak     int
	flaked   map[string]bool
	inFlight chan struct{} // a signal per SendMessageBatch started
}

func newFakeSender(fifo bool) *fakeSender {
	return &fakeSender{fifo: fifo, flaked: map[string]bool{}, hold: map[string]chan struct{}{}, inFlight: make(chan struct{}, 1000)}
}

func (f *fakeSender) GetQueueUrl(_ context.Context, in *awssqs.GetQueueUrlInput, _ ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error) {
	return &awssqs.GetQueueUrlOutput{QueueUrl: aws.String("https://sqs.test/1/" + aws.ToString(in.QueueName))}, nil
}

func (f *fakeSender) GetQueueAttributes(context.Context, *awssqs.GetQueueAttributesInput, ...func(*awssqs.Options)) (*awssqs.GetQueueAttributesOutput, error) {
	return &awssqs.GetQueueAttributesOutput{Attributes: map[string]string{"FifoQueue": strconv.FormatBool(f.fifo)}}, nil
}

func (f *fakeSender) SendMessage(_ context.Context, in *awssqs.SendMessageInput, _ ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.singles++
	f.sent = append(f.sent, types.SendMessageBatchRequestEntry{MessageBody: in.MessageBody, MessageGroupId: in.MessageGroupId})
	return &awssqs.SendMessageOutput{MessageId: aws.String("m")}, nil
}

func (f *fakeSender) SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, _ ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	f.batches = append(f.batches, in.Entries)
	f.running++
	f.peak = max(f.peak, f.running)
	gate := f.gate
	for _, e := range in.Entries {
		if h, ok := f.hold[aws.ToString(e.MessageBody)]; ok {
			gate = h
		}
	}
	f.mu.Unlock()
	f.inFlight <- struct{}{}
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running--
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := &awssqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		body := aws.ToString(e.MessageBody)
		switch {
		case strings.HasPrefix(body, "bad"):
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidMessageContents"), SenderFault: true})
		case strings.HasPrefix(body, "flaky") && !f.flaked[body]:
			f.flaked[body] = true
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError")})
		default:
			f.sent = append(f.sent, e)
			out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String("m")})
		}
	}
	return out, nil
}

func (f *fakeSender) counts() (batches, singles int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.batches), f.singles
}

// waitBatches waits until n SendMessageBatch requests have started.
func (f *fakeSender) waitBatches(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-f.inFlight:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for SendMessageBatch requests")
		}
	}
}

// plug publishes a message whose request is held in flight, so that the
// calls after it queue (a lone call is sent at once), and returns what
// releases it and waits for its Publish.
func plug(t *testing.T, p *Publisher, f *fakeSender) (release func()) {
	t.Helper()
	h := make(chan struct{})
	f.mu.Lock()
	f.hold["plug"] = h
	f.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- p.Publish("t", message.NewMessage("plug", []byte("plug"))) }()
	f.waitBatches(t, 1)
	return func() {
		close(h)
		if err := <-done; err != nil {
			t.Errorf("plug: %v", err)
		}
	}
}

// waitQueued waits until n messages wait in p's (only) coalescer.
func waitQueued(t *testing.T, p *Publisher, n int) {
	t.Helper()
	waitUntil(t, 10*time.Second, fmt.Sprintf("%d queued messages", n), func() bool {
		cs := p.coalescers.all()
		if len(cs) == 0 {
			return false
		}
		cs[0].mu.Lock()
		defer cs[0].mu.Unlock()
		return len(cs[0].queue) == n
	})
}

func lingerPublisher(api API, linger time.Duration, mod func(*PublisherConfig)) *Publisher {
	cfg := PublisherConfig{PublishLinger: linger}
	if mod != nil {
		mod(&cfg)
	}
	return newPublisher(api, nil, cfg, nil)
}

// publishAll publishes one message per body, each by its own concurrent
// Publish call, and returns each call's error.
func publishAll(p *Publisher, topic string, bodies ...string) (wait func() []error) {
	errs := make([]error, len(bodies))
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Go(func() { errs[i] = p.Publish(topic, message.NewMessage(fmt.Sprintf("u%d", i), []byte(b))) })
	}
	return func() []error { wg.Wait(); return errs }
}

func bodies(prefix string, n int) []string {
	bs := make([]string, n)
	for i := range bs {
		bs[i] = prefix + strconv.Itoa(i)
	}
	return bs
}

// Concurrent single-message Publish calls share SendMessageBatch requests
// of 10; the rest goes with the Close flush. (The linger is an hour, so
// only full batches and Close send.)
func TestPublishLingerCoalescesConcurrentCalls(t *testing.T) {
	f := newFakeSender(false)
	p := lingerPublisher(f, time.Hour, nil)
	release := plug(t, p, f)
	wait := publishAll(p, "t", bodies("m", 25)...)
	f.waitBatches(t, 2)
	waitQueued(t, p, 5)
	release()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i, err := range wait() {
		if err != nil {
			t.Errorf("publish %d: %v", i, err)
		}
	}
	batches, singles := f.counts()
	if batches != 4 || singles != 0 {
		t.Fatalf("%d SendMessageBatch and %d SendMessage requests for the plug and 25 messages, want 4 and 0", batches, singles)
	}
	for i, want := range []int{1, 10, 10, 5} {
		if got := len(f.batches[i]); got != want {
			t.Errorf("batch %d has %d entries, want %d", i, got, want)
		}
	}
	if len(f.sent) != 26 {
		t.Errorf("%d messages sent, want 26", len(f.sent))
	}
}

// A lone caller never waits for company; a message that has company in
// flight waits at most the linger.
func TestPublishLingerSendsAlone(t *testing.T) {
	f := newFakeSender(false)
	p := lingerPublisher(f, time.Hour, nil)
	for i := range 3 {
		if err := p.Publish("t", message.NewMessage("u", []byte("m"+strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
	_ = p.Close()
	if batches, _ := f.counts(); batches != 3 {
		t.Fatalf("%d requests for 3 sequential calls, want 3", batches)
	}

	f = newFakeSender(false)
	p = lingerPublisher(f, 2*time.Millisecond, nil)
	defer p.Close()
	release := plug(t, p, f)
	defer release()
	if err := p.Publish("t", message.NewMessage("u", []byte("m"))); err != nil { // two in progress: it lingers
		t.Fatal(err)
	}
	if batches, _ := f.counts(); batches != 2 {
		t.Fatalf("%d requests, want 2", batches)
	}
}

// A pool of producers publishing one message per call shares requests.
func TestPublishLingerPoolOfProducers(t *testing.T) {
	f := newFakeSender(false)
	p := lingerPublisher(f, 20*time.Millisecond, nil)
	const producers, each = 4, 50
	var wg sync.WaitGroup
	for g := range producers {
		wg.Go(func() {
			for i := range each {
				if err := p.Publish("t", message.NewMessage("u", []byte(fmt.Sprint(g, i)))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	_ = p.Close()
	if batches, _ := f.counts(); batches >= producers*each {
		t.Fatalf("%d requests for %d messages from %d producers: nothing shared", batches, producers*each, producers)
	}
}

// Up to PublishConcurrency batches are in flight per queue; the next full
// batch waits for one of them.
func TestPublishLingerBoundsBatchesInFlight(t *testing.T) {
	f := newFakeSender(false)
	f.gate = make(chan struct{})
	p := lingerPublisher(f, time.Hour, func(c *PublisherConfig) { c.PublishConcurrency = 2 })
	first := publishAll(p, "t", "first") // alone: at once
	f.waitBatches(t, 1)
	wait := publishAll(p, "t", bodies("m", 20)...)
	f.waitBatches(t, 1)
	waitQueued(t, p, 10)
	if batches, _ := f.counts(); batches != 2 {
		t.Fatalf("%d batches started with PublishConcurrency 2, want 2", batches)
	}
	f.mu.Lock()
	close(f.gate)
	f.mu.Unlock()
	for i, err := range append(first(), wait()...) {
		if err != nil {
			t.Errorf("publish %d: %v", i, err)
		}
	}
	_ = p.Close()
	if batches, _ := f.counts(); batches != 3 || f.peak != 2 {
		t.Fatalf("%d batches, %d at once; want 3, at most 2", batches, f.peak)
	}
}

// A failed entry is returned to its own caller only; an entry that failed
// on the server side is sent again.
func TestPublishLingerEntryErrorsGoToTheirCaller(t *testing.T) {
	f := newFakeSender(false)
	p := lingerPublisher(f, time.Hour, nil)
	release := plug(t, p, f)
	bs := bodies("m", 10)
	bs[3] = "bad"
	bs[6] = "flaky"
	errs := publishAll(p, "t", bs...)()
	release()
	for i, err := range errs {
		switch i {
		case 3:
			var ee *EntryError
			if !errors.As(err, &ee) || ee.Code != "InvalidMessageContents" {
				t.Errorf("publish of the bad message: %v, want its EntryError", err)
			}
			if !strings.Contains(err.Error(), "u3") {
				t.Errorf("error %q does not name the message", err)
			}
		default:
			if err != nil {
				t.Errorf("publish %d: %v", i, err)
			}
		}
	}
	_ = p.Close()
	if batches, _ := f.counts(); batches != 3 { // the plug, the batch, the flaky entry again
		t.Fatalf("%d requests, want 3", batches)
	}
}

// With no linger each call sends its own request: SendMessage for one
// message.
func TestPublishNoLingerOneRequestPerCall(t *testing.T) {
	f := newFakeSender(false)
	p := lingerPublisher(f, 0, nil)
	for i, err := range publishAll(p, "t", bodies("m", 8)...)() {
		if err != nil {
			t.Errorf("publish %d: %v", i, err)
		}
	}
	if err := p.Publish("t", message.NewMessage("x", []byte("x")), message.NewMessage("y", []byte("y"))); err != nil {
		t.Fatal(err)
	}
	_ = p.Close()
	batches, singles := f.counts()
	if singles != 8 || batches != 1 {
		t.Fatalf("%d SendMessage and %d SendMessageBatch requests, want 8 and 1", singles, batches)
	}
}

// On a FIFO queue, each group's messages are sent in the order of the
// Publish calls that returned, with many groups publishing at once into
// shared batches.
func TestPublishLingerKeepsFIFOGroupOrder(t *testing.T) {
	f := newFakeSender(true)
	p := lingerPublisher(f, time.Millisecond, func(c *PublisherConfig) { c.PublishConcurrency = 4 })
	const groups, each = 12, 20
	var wg sync.WaitGroup
	for g := range groups {
		wg.Go(func() {
			for i := range each {
				m := message.NewMessage(fmt.Sprintf("g%d-%d", g, i), []byte(strconv.Itoa(i)))
				m.Metadata.Set(MetadataGroupID, "g"+strconv.Itoa(g))
				if err := p.Publish("t.fifo", m); err != nil {
					t.Errorf("group %d message %d: %v", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	_ = p.Close()
	next := map[string]int{}
	for _, e := range f.sent {
		g := aws.ToString(e.MessageGroupId)
		if got := aws.ToString(e.MessageBody); got != strconv.Itoa(next[g]) {
			t.Fatalf("group %s: message %s sent when %d was next", g, got, next[g])
		}
		next[g]++
	}
	if len(f.sent) != groups*each {
		t.Fatalf("%d sent, want %d", len(f.sent), groups*each)
	}
	if batches, _ := f.counts(); batches >= groups*each {
		t.Errorf("%d requests for %d messages: nothing shared", batches, groups*each)
	}
}

// A caller whose context ends withdraws its queued message; the others are
// sent. A caller whose message is already in flight returns at once without
// cancelling the request for the others.
func TestPublishLingerCancellationIsPerCaller(t *testing.T) {
	f := newFakeSender(false)
	p := lingerPublisher(f, time.Hour, nil)
	release := plug(t, p, f)

	ctx, cancel := context.WithCancel(context.Background())
	queued := message.NewMessage("queued", []byte("queued"))
	queued.SetContext(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Publish("t", queued) }()
	wait := publishAll(p, "t", "a", "b")
	waitQueued(t, p, 3)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled publish: %v, want context.Canceled", err)
	}

	// Now one of a full batch in flight.
	hold := make(chan struct{})
	f.mu.Lock()
	f.hold["inflight"] = hold
	f.mu.Unlock()
	ctx2, cancel2 := context.WithCancel(context.Background())
	inFlight := message.NewMessage("inflight", []byte("inflight"))
	inFlight.SetContext(ctx2)
	go func() { done <- p.Publish("t", inFlight) }()
	waitQueued(t, p, 3)
	wait2 := publishAll(p, "t", bodies("m", 7)...) // fills the batch of 10
	f.waitBatches(t, 1)
	cancel2()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled publish in flight: %v, want context.Canceled", err)
	}
	close(hold) // the fake fails the request if its context was cancelled
	release()
	for i, err := range append(wait(), wait2()...) {
		if err != nil {
			t.Errorf("publish %d: %v", i, err)
		}
	}
	_ = p.Close()
	for _, e := range f.sent {
		if aws.ToString(e.MessageBody) == "queued" {
			t.Error("the withdrawn message was sent")
		}
	}
	if len(f.sent) != 11 {
		t.Errorf("%d messages sent, want 11 (plug, a, b, inflight and 7 more)", len(f.sent))
	}
}

// Close sends what waits for company at once and waits for it; it is
// idempotent, and later calls fail with ErrClosed.
func TestPublishLingerCloseFlushes(t *testing.T) {
	f := newFakeSender(false)
	p := lingerPublisher(f, time.Hour, nil)
	release := plug(t, p, f)
	wait := publishAll(p, "t", "a", "b", "c")
	waitQueued(t, p, 3)
	release()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i, err := range wait() {
		if err != nil {
			t.Errorf("publish %d: %v", i, err)
		}
	}
	if batches, _ := f.counts(); batches != 2 || len(f.sent) != 4 {
		t.Fatalf("%d requests, %d sent; want 2 (the plug, the flush) and 4", batches, len(f.sent))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish("t", message.NewMessage("late", []byte("late"))); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("publish after Close: %v, want ErrClosed", err)
	}
}

// A batch holds no more than MaxBatchBytes.
func TestPublishLingerHoldsBatchBytes(t *testing.T) {
	f := newFakeSender(false)
	p := lingerPublisher(f, time.Hour, func(c *PublisherConfig) { c.MaxBatchBytes = 1000 })
	release := plug(t, p, f)
	body := strings.Repeat("x", 400)
	wait := publishAll(p, "t", body, body, body, body, body)
	f.waitBatches(t, 2) // two full batches of two (a third would exceed 1000 bytes)
	release()
	_ = p.Close()
	for i, err := range wait() {
		if err != nil {
			t.Errorf("publish %d: %v", i, err)
		}
	}
	for i, b := range f.batches {
		size := 0
		for _, e := range b {
			size += messageSize(aws.ToString(e.MessageBody), e.MessageAttributes)
		}
		if size > 1000 {
			t.Errorf("batch %d: %d bytes, limit 1000", i, size)
		}
	}
	if len(f.batches) != 4 {
		t.Errorf("%d batches, want 4 (the plug, two, two, one)", len(f.batches))
	}
}

// The URL parameter publish_linger sets PublishLinger, from 0 to 1s.
func TestPublishLingerURLAndValidation(t *testing.T) {
	ctx := context.Background()
	pub, err := transport.OpenPublisher(ctx, "sqs://test:test@127.0.0.1:1?region=us-east-1&publish_linger=5ms")
	if err != nil {
		t.Fatal(err)
	}
	if got := pub.(*Publisher).cfg.PublishLinger; got != 5*time.Millisecond {
		t.Errorf("PublishLinger = %s, want 5ms", got)
	}
	_ = pub.Close()
	for _, u := range []string{"sqs://127.0.0.1:1?publish_linger=2s", "sqs://127.0.0.1:1?publish_linger=-1ms", "sqs://127.0.0.1:1?publish_linger=soon"} {
		if _, err := transport.OpenPublisher(ctx, u); !errors.Is(err, transport.ErrInvalidConfig) {
			t.Errorf("OpenPublisher(%s) = %v, want ErrInvalidConfig", u, err)
		}
	}
	if err := (PublisherConfig{PublishLinger: -time.Millisecond}).Validate(); !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "PublishLinger") {
		t.Errorf("Validate = %v, want ErrInvalidConfig naming PublishLinger", err)
	}
}
