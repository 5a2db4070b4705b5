package sqs

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// faultyTransport sits between the SDK and the emulator. It answers the
// next fail[op] requests of an operation (all of them while it is negative)
// with one of the faults below, in turn, without reaching the emulator, and
// passes the others through. It records when each ReceiveMessage was sent.
type faultyTransport struct {
	next http.RoundTripper

	mu       sync.Mutex
	fail     map[string]int
	injected int
	receives []time.Time
}

// setFaults sets how many requests of op to fail from now (negative: all).
func (f *faultyTransport) setFaults(op string, n int) {
	f.mu.Lock()
	f.fail[op] = n
	f.mu.Unlock()
}

// fault is an error response as SQS's JSON protocol sends it.
type fault struct {
	status int
	code   string
}

// The faults the SDK retryer and the pipeline must survive: server errors
// and both throttling codes SQS uses.
var injectedFaults = []fault{
	{http.StatusInternalServerError, "InternalError"},
	{http.StatusBadRequest, "ThrottlingException"},
	{http.StatusServiceUnavailable, "ServiceUnavailable"},
	{http.StatusForbidden, "RequestThrottled"},
}

func (f *faultyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := req.Header.Get("X-Amz-Target")
	op = op[strings.LastIndexByte(op, '.')+1:]
	f.mu.Lock()
	if op == "ReceiveMessage" {
		f.receives = append(f.receives, time.Now())
	}
	inject := f.fail[op] != 0
	var flt fault
	if inject {
		if f.fail[op] > 0 {
			f.fail[op]--
		}
		flt = injectedFaults[f.injected%len(injectedFaults)]
		f.injected++
	}
	f.mu.Unlock()
	if !inject {
		return f.next.RoundTrip(req)
	}
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	body := `{"__type":"com.amazonaws.sqs#` + flt.code + `","message":"injected by the test"}`
	return &http.Response{
		Status:     strconv.Itoa(flt.status) + " " + http.StatusText(flt.status),
		StatusCode: flt.status,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":       {"application/x-amz-json-1.0"},
			"X-Amzn-Query-Error": {flt.code + ";Sender"},
			"X-Amzn-Requestid":   {"injected"},
		},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}

func (f *faultyTransport) receiveTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.receives...)
}

// TestThrottlingAndServerErrorsBackOff puts a fault-injecting HTTP transport
// between the SDK and the emulator: every ReceiveMessage fails with 500s,
// 503s and throttling errors for a while, then a few DeleteMessageBatch
// requests do. The listener keeps its loop, counts consecutive failures, reports
// backing off, spaces its attempts with jittered, growing delays, and once
// the faults stop it recovers: every message is delivered and acked, none
// lost, and messages published afterwards flow too.
func TestThrottlingAndServerErrorsBackOff(t *testing.T) {
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, nil), Queue: QueueConfig{Create: true}}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	topic := testenv.UniqueName("faults")
	const n = 30
	want := map[string]bool{}
	publish := func(prefix string) {
		t.Helper()
		msgs := make([]*message.Message, n)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(prefix+strconv.Itoa(i)))
			want[msgs[i].UUID] = true
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	publish("before-")

	ft := &faultyTransport{
		next: http.DefaultTransport.(*http.Transport).Clone(),
		fail: map[string]int{"ReceiveMessage": -1},
	}
	defer ft.next.(*http.Transport).CloseIdleConnections()
	client := clientConfig(t, nil)
	client.AWS.HTTPClient = &http.Client{Transport: ft}
	client.RequestAttempts = 2 // the SDK retries once, then the pipeline backs off
	sub := newTestSubscriber(t, SubscriberConfig{
		Client:            client,
		Queue:             QueueConfig{Create: true},
		VisibilityTimeout: 5 * time.Second,
		Pipeline: receiver.Config{
			ErrorBackoff:  20 * time.Millisecond,
			MaxErrorDelay: 400 * time.Millisecond,
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	// One consumer acks everything (redeliveries of messages whose ack
	// failed included) and records what it saw.
	var (
		mu  sync.Mutex
		got = map[string]bool{}
	)
	seen := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for m := range ch {
			mu.Lock()
			got[m.UUID] = true
			mu.Unlock()
			m.Ack()
		}
	}()
	defer func() { cancel(); <-consumed }()
	state := func() transport.ListenerState {
		ss := sub.ListenerStates()
		if len(ss) != 1 {
			t.Fatalf("%d listeners, want 1", len(ss))
		}
		return ss[0]
	}

	// While every request fails, failures pile up and the loop backs off.
	waitUntil(t, 60*time.Second, "5 consecutive failed receives", func() bool { return state().ConsecutiveFailures >= 5 })
	s := state()
	if s.Loop != transport.LoopBackingOff {
		t.Fatalf("loop state %s while receives fail, want %s", s.Loop, transport.LoopBackingOff)
	}
	if s.Status != transport.StatusAccepting || s.Faulted {
		t.Fatalf("status %s (faulted %v) while receives fail: the loop must not end or fault", s.Status, s.Faulted)
	}
	if s.LastError == "" {
		t.Fatal("no LastError while receives fail")
	}
	t.Logf("after %d failures: loop %s, last error %q", s.ConsecutiveFailures, s.Loop, s.LastError)
	if n := seen(); n > 0 {
		t.Fatalf("%d messages delivered while every receive fails", n)
	}

	// Attempts are spaced by the SDK's and the pipeline's jittered backoff:
	// no hot loop, and not one fixed period.
	times := ft.receiveTimes()
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	if len(gaps) < 4 {
		t.Fatalf("only %d receive attempts", len(times))
	}
	distinct := false
	for _, g := range gaps[1:] {
		if d := g - gaps[0]; d > time.Millisecond || d < -time.Millisecond {
			distinct = true
		}
	}
	if !distinct {
		t.Fatalf("receive attempts at a fixed period (%v): no jitter", gaps)
	}
	elapsed := times[len(times)-1].Sub(times[0])
	// A hot loop would retry thousands of times a second; with a 20ms first
	// delay, jittered into [10ms, 20ms] and doubling, and two SDK attempts
	// per receive, the first five failures can legitimately come at ~50/s.
	if rate := float64(len(gaps)) / elapsed.Seconds(); rate > 200 {
		t.Fatalf("%d receive attempts in %s (%.0f/s): not backing off", len(times), elapsed, rate)
	}

	// Receives recover; the first three DeleteMessageBatch requests fail
	// (the first batch of acks fails both its attempts, so those messages
	// come back after their visibility timeout). Everything arrives, acks
	// go through in the end, later messages flow too.
	ft.setFaults("DeleteMessageBatch", 3)
	ft.setFaults("ReceiveMessage", 0)
	publish("after-")
	waitUntil(t, 30*time.Second, "every message delivered", func() bool { return seen() >= len(want) })
	waitUntil(t, 10*time.Second, "the loop to recover", func() bool {
		s := state()
		return s.ConsecutiveFailures == 0 && s.Loop == transport.LoopRunning && !s.LastReceive.IsZero()
	})
	api := rawClient(t)
	url := aws.ToString(must(api.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(topic)})).QueueUrl)
	waitUntil(t, 20*time.Second, "every ack to reach the queue", func() bool {
		out, err := api.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url),
			AttributeNames: []types.QueueAttributeName{
				types.QueueAttributeNameApproximateNumberOfMessages,
				types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			},
		})
		return err == nil && out.Attributes["ApproximateNumberOfMessages"] == "0" && out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
	})
	mu.Lock()
	for id := range got {
		if !want[id] {
			t.Errorf("unexpected message %s", id)
		}
	}
	mu.Unlock()
	ft.mu.Lock()
	t.Logf("%d faults injected, %d receive attempts", ft.injected, len(ft.receives))
	ft.mu.Unlock()
}
