package sqs

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
)

var (
	measureClose = flag.Bool("sqs.measure-close", false,
		"run TestMeasureClose: how long idle subscribers take to close and whether messages sent around Close are delivered late (takes minutes)")
	measureWaits = flag.String("sqs.measure-close.waits", "20s,5s", "WaitTime values to measure, comma-separated")
	measureDrain = flag.Duration("sqs.measure-close.drain", 0, "Pipeline.DrainTimeout of the subscribers (0: the default)")
	measureRuns  = flag.Int("sqs.measure-close.runs", 5, "single idle subscribers closed per WaitTime, each at a random point of its long poll")
	measureN     = flag.Int("sqs.measure-close.n", 50, "idle subscribers closed one after another per WaitTime (0: skip)")
)

// lateAfter is how long after it was sent a probe counts as late: a
// released or untouched message is received within a second or two, one
// taken by an abandoned long poll only after the visibility timeout (30s).
const lateAfter = 5 * time.Second

// TestMeasureClose measures, on the emulator, what closing idle subscribers
// costs, for each WaitTime in -sqs.measure-close.waits (the numbers in
// docs/transports/sqs.md, "Closing"):
//
//   - the Close time of one idle subscriber, closed at a random point of its
//     long poll (-sqs.measure-close.runs times), and as many closes that
//     get a message 100ms in;
//   - the total Close time of -sqs.measure-close.n idle subscribers, each on
//     its own queue, started together and closed one after another;
//   - late deliveries: after each Close returns (and 100ms into every other
//     single subscriber's Close), a probe message is sent to the queue; a
//     probe that another consumer gets only after lateAfter was taken by a
//     long poll Close abandoned, and waited out the visibility timeout.
//
// Numbers are logged, not asserted:
//
//	go test -run TestMeasureClose -v -timeout 2h ./transport/sqs/ -sqs.measure-close
func TestMeasureClose(t *testing.T) {
	if !*measureClose {
		t.Skip("measurement; run with -sqs.measure-close")
	}
	api := rawClient(t)
	t.Logf("load average at start: %s", loadAverage())
	for w := range strings.SplitSeq(*measureWaits, ",") {
		wait, err := time.ParseDuration(strings.TrimSpace(w))
		if err != nil {
			t.Fatal(err)
		}
		var idle, busy []time.Duration
		var probes []*probe
		c := &collector{t: t, api: api}
		for i := range 2 * *measureRuns {
			s := openIdle(t, api, wait)
			// A random point of the long poll, as when a deploy comes.
			time.Sleep(rand.N(max(wait, time.Second)))
			// Every other Close gets a message 100ms in, which ends the
			// long poll early: its time is not the idle close time.
			d, ps := closeWithProbes(t, api, s, i%2 == 1)
			c.collect(s.url, ps)
			if i%2 == 1 {
				busy = append(busy, d)
			} else {
				idle = append(idle, d)
			}
			probes = append(probes, ps...)
		}
		c.wait()
		t.Logf("WaitTime %s, DrainTimeout %s: one idle subscriber: Close %s; with a message 100ms into Close: %s; probes: %s",
			wait, drainTimeout(), summarize(idle), summarize(busy), lateSummary(probes))

		if *measureN <= 0 {
			continue
		}
		subs := make([]*idleSub, *measureN)
		var wg sync.WaitGroup
		for i := range subs {
			wg.Go(func() { subs[i] = openIdle(t, api, wait) })
		}
		wg.Wait()
		probes = nil
		c = &collector{t: t, api: api}
		var each []time.Duration
		start := time.Now()
		for _, s := range subs {
			d, ps := closeWithProbes(t, api, s, false)
			c.collect(s.url, ps)
			each = append(each, d)
			probes = append(probes, ps...)
		}
		total := time.Since(start)
		c.wait()
		t.Logf("WaitTime %s, DrainTimeout %s: %d idle subscribers closed one after another: %s in all, each %s; probes: %s",
			wait, drainTimeout(), len(subs), total.Round(100*time.Millisecond), summarize(each), lateSummary(probes))
	}
	t.Logf("load average at end: %s", loadAverage())
}

// idleSub is a subscriber consuming an empty queue, its long poll out.
type idleSub struct {
	sub *Subscriber
	url string
}

func openIdle(t *testing.T, api *awssqs.Client, wait time.Duration) *idleSub {
	t.Helper()
	topic := testenv.UniqueName("close")
	url := createQueue(t, api, topic, nil)
	polls := &countingSQS{API: api}
	sub, err := NewSubscriber(SubscriberConfig{
		Client:   ClientConfig{SQS: polls},
		WaitTime: wait,
		Pipeline: receiver.Config{DrainTimeout: *measureDrain},
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Subscribe(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the first long poll", func() bool { return polls.count("ReceiveMessage") > 0 })
	return &idleSub{sub: sub, url: url}
}

// probe is a message sent around a Close.
type probe struct {
	when  string // "during" or "after" Close
	url   string
	id    string
	sent  time.Time
	delay time.Duration // until another consumer received it; 0: never
}

func sendProbe(t *testing.T, api *awssqs.Client, url, when string) *probe {
	t.Helper()
	p := &probe{when: when, url: url, sent: time.Now()}
	p.id = sendRaw(t, api, url, "probe "+when, nil)
	return p
}

// closeWithProbes closes s, sending a probe when it has returned and, with
// during, one 100ms into Close (if it is still running).
func closeWithProbes(t *testing.T, api *awssqs.Client, s *idleSub, during bool) (time.Duration, []*probe) {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.sub.Close()
	}()
	var ps []*probe
	if during {
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond): // a point in the scenario, not synchronisation
			ps = append(ps, sendProbe(t, api, s.url, "during"))
		}
	}
	<-done
	d := time.Since(start)
	ps = append(ps, sendProbe(t, api, s.url, "after"))
	return d, ps
}

// collector receives probes as another consumer would, each queue's from
// the moment its Close returned, for up to the visibility timeout and then
// some, and records when each arrived.
type collector struct {
	t   *testing.T
	api *awssqs.Client
	wg  sync.WaitGroup
}

// collect starts receiving the probes of one queue.
func (c *collector) collect(url string, ps []*probe) {
	deadline := time.Now().Add(DefaultVisibilityTimeout + 15*time.Second)
	c.wg.Go(func() {
		left := len(ps)
		for left > 0 && time.Now().Before(deadline) {
			out, err := c.api.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{
				QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 300,
			})
			if err != nil {
				c.t.Error(err)
				return
			}
			now := time.Now()
			for _, m := range out.Messages {
				for _, p := range ps {
					if p.id == aws.ToString(m.MessageId) && p.delay == 0 {
						p.delay = now.Sub(p.sent)
						left--
					}
				}
			}
		}
	})
}

// wait waits for every collection to end.
func (c *collector) wait() { c.wg.Wait() }

func lateSummary(ps []*probe) string {
	var parts []string
	for _, when := range []string{"during", "after"} {
		n, late, lost := 0, 0, 0
		var worst time.Duration
		for _, p := range ps {
			if p.when != when {
				continue
			}
			n++
			switch {
			case p.delay == 0:
				lost++
			case p.delay > lateAfter:
				late++
			}
			worst = max(worst, p.delay)
		}
		if n == 0 {
			continue
		}
		s := fmt.Sprintf("%s Close: %d sent, %d late", when, n, late)
		if late > 0 {
			s += fmt.Sprintf(" (worst %s)", worst.Round(100*time.Millisecond))
		}
		if lost > 0 {
			s += fmt.Sprintf(", %d not received in %s", lost, DefaultVisibilityTimeout+15*time.Second)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("mean %s, min %s, max %s (n=%d)", r(sum/time.Duration(len(s))), r(s[0]), r(s[len(s)-1]), len(s))
}

func drainTimeout() time.Duration {
	if *measureDrain > 0 {
		return *measureDrain
	}
	return receiver.DefaultDrainTimeout
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
