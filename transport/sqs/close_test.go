package sqs

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// heldPoll is an SQS API whose ReceiveMessage waits until the test lets it
// return two messages (or its context ends), and which records the
// visibility changes it gets.
type heldPoll struct {
	API
	started chan struct{} // one value per ReceiveMessage
	proceed chan struct{} // closed: ReceiveMessage returns its messages

	mu       sync.Mutex
	pollErr  error // the poll's ctx.Err() when it returned
	returned bool
	changes  []types.ChangeMessageVisibilityBatchRequestEntry
}

func newHeldPoll() *heldPoll {
	return &heldPoll{started: make(chan struct{}, 10), proceed: make(chan struct{})}
}

func (h *heldPoll) ReceiveMessage(ctx context.Context, _ *awssqs.ReceiveMessageInput, _ ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error) {
	h.started <- struct{}{}
	select {
	case <-h.proceed:
	case <-ctx.Done():
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pollErr, h.returned = ctx.Err(), true
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &awssqs.ReceiveMessageOutput{Messages: []types.Message{
		{MessageId: aws.String("m1"), ReceiptHandle: aws.String("r1"), Body: aws.String("")},
		{MessageId: aws.String("m2"), ReceiptHandle: aws.String("r2"), Body: aws.String("")},
	}}, nil
}

func (h *heldPoll) ChangeMessageVisibilityBatch(_ context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, _ ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append(h.changes, in.Entries...)
	return &awssqs.ChangeMessageVisibilityBatchOutput{}, nil
}

func (h *heldPoll) state() (returned bool, changes []types.ChangeMessageVisibilityBatchRequestEntry, pollErr error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.returned, append([]types.ChangeMessageVisibilityBatchRequestEntry(nil), h.changes...), h.pollErr
}

func heldSource(h *heldPoll, wait time.Duration) *Source {
	cfg := SubscriberConfig{WaitTime: wait}.WithDefaults()
	return newSource(h, &queue{name: "q", url: "http://sqs.invalid/q"}, nil, cfg, watermill.NopLogger{})
}

// claimThenCancel starts a Claim, waits for its poll, cancels the Claim and
// checks that it returned the cancellation at once.
func claimThenCancel(t *testing.T, src *Source, h *heldPoll) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	claimed := make(chan error, 1)
	go func() {
		_, err := src.Claim(ctx, 10)
		claimed <- err
	}()
	<-h.started
	cancel()
	if err := <-claimed; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Claim returned %v, want context.Canceled", err)
	}
}

// TestCloseLetsPollFinishAndReleases: a Claim cancelled during its long poll
// returns at once, but Close, even with a context already done, neither
// cancels the poll nor returns before it; what the poll returns is made
// visible again (visibility 0). After Close, Claim starts no poll.
func TestCloseLetsPollFinishAndReleases(t *testing.T) {
	h := newHeldPoll()
	src := heldSource(h, 20*time.Second)
	claimThenCancel(t, src, h)

	done, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- src.Close(done) }()
	waitUntil(t, 10*time.Second, "Close to stop new polls", func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.closing
	})
	if returned, _, _ := h.state(); returned {
		t.Fatal("the poll returned before the test let it")
	}
	close(h.proceed)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, changes, pollErr := h.state()
	if pollErr != nil {
		t.Errorf("the poll's context ended (%v): Close cut the long poll short", pollErr)
	}
	released := map[string]int32{}
	for _, e := range changes {
		released[aws.ToString(e.ReceiptHandle)] = e.VisibilityTimeout
	}
	if len(released) != 2 || released["r1"] != 0 || released["r2"] != 0 {
		t.Errorf("visibility changes %v, want r1 and r2 made visible (0)", released)
	}
	if _, err := src.Claim(context.Background(), 10); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Claim after Close = %v, want ErrClosed", err)
	}
	if len(h.started) != 0 {
		t.Error("Claim after Close started a long poll")
	}
}

// TestCloseBeforeAnyClaim: a source that never polled closes at once,
// without error, and then refuses to poll.
func TestCloseBeforeAnyClaim(t *testing.T) {
	h := newHeldPoll()
	src := heldSource(h, 20*time.Second)
	if err := src.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := src.Claim(context.Background(), 10); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Claim after Close = %v, want ErrClosed", err)
	}
}

// TestCloseCancelsHungPoll: a long poll still out closeGrace after its wait
// (a hung connection) is cancelled, and Close says so.
func TestCloseCancelsHungPoll(t *testing.T) {
	h := newHeldPoll()
	src := heldSource(h, time.Second)
	claimThenCancel(t, src, h)
	err := src.Close(context.Background())
	if err == nil {
		t.Fatal("Close returned nil after cancelling a hung long poll")
	}
	if _, _, pollErr := h.state(); !errors.Is(pollErr, context.Canceled) {
		t.Errorf("the hung poll's context: %v, want cancelled", pollErr)
	}
}

// TestCloseLeavesNoMessageBehind: closing a subscriber whose long poll is out
// hides no message behind the visibility timeout (10 minutes here). The
// subscriber's drain deadline (500ms) is far shorter than its poll (3s):
// the poll must not be cut at it. Before, a message sent right after Close
// returned was taken by the poll Close had cancelled client-side (the
// emulator, like SQS, keeps a cancelled poll waiting) and stayed hidden.
func TestCloseLeavesNoMessageBehind(t *testing.T) {
	t.Run("sent right after Close", func(t *testing.T) {
		api, url, sub, polls := idleSubscriber(t)
		waitUntil(t, 30*time.Second, "the first long poll", func() bool { return polls.count("ReceiveMessage") >= 1 })
		closeWithin(t, sub, time.Minute)
		after := sendRaw(t, api, url, "right after Close", nil)
		receiveAll(t, api, url, after)
	})
	t.Run("sent just before Close", func(t *testing.T) {
		// Received, never handed to user code: released by Close.
		api, url, sub, polls := idleSubscriber(t)
		waitUntil(t, 30*time.Second, "the first long poll", func() bool { return polls.count("ReceiveMessage") >= 1 })
		before := sendRaw(t, api, url, "just before Close", nil)
		waitUntil(t, 30*time.Second, "the poll that got it", func() bool { return polls.count("ReceiveMessage") >= 2 })
		closeWithin(t, sub, time.Minute)
		receiveAll(t, api, url, before)
	})
}

func idleSubscriber(t *testing.T) (*awssqs.Client, string, *Subscriber, *countingSQS) {
	t.Helper()
	api := rawClient(t)
	topic := testenv.UniqueName("close")
	url := createQueue(t, api, topic, nil)
	polls := &countingSQS{API: api}
	sub, err := NewSubscriber(SubscriberConfig{
		Client:            ClientConfig{SQS: polls},
		WaitTime:          3 * time.Second,
		VisibilityTimeout: 10 * time.Minute,
		Pipeline:          receiver.Config{DrainTimeout: 500 * time.Millisecond},
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Subscribe(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	return api, url, sub, polls
}

func closeWithin(t *testing.T, sub *Subscriber, d time.Duration) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Fatalf("Close did not return within %s", d)
	}
}

// receiveAll waits (a minute at most, far less than the visibility timeout)
// until another consumer has received every message of ids.
func receiveAll(t *testing.T, api *awssqs.Client, url string, ids ...string) {
	t.Helper()
	got := map[string]bool{}
	waitUntil(t, time.Minute, "the messages at another consumer", func() bool {
		for _, m := range receiveRaw(t, api, url, 600) {
			got[aws.ToString(m.MessageId)] = true
		}
		for _, id := range ids {
			if !got[id] {
				return false
			}
		}
		return true
	})
}
