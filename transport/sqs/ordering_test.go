package sqs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/orderingtest"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// TestFIFOOrderedLedger is the SQL kit's OrderedPerKeyAcrossInstances on
// an SQS FIFO queue against the emulator: publishers send keys × per
// messages with berth_ordering_key (the publisher makes it the
// MessageGroupId), one or two of a key per call, keys interleaved, with
// unkeyed messages (group: the topic) mixed in; several subscribers of
// the queue handle them with random handler times and random nacks (each
// retried in place after its visibility delay), and one subscriber is
// killed mid-run: every request it makes fails from then on, so its
// messages come back after their visibility timeout, and it is closed.
// Per key, handler runs never overlap across instances and follow publish
// order; nothing is lost. BERTH_TEST_ORDERING_FULL=1 runs issue 21's size
// (1,000 keys × 50, 4 instances × concurrency 64).
//
// The emulator (fauxqs 1.9.2) locks a group while one of its messages is
// in flight but returns at most one message per group per ReceiveMessage,
// so this run never holds a group's second message in the buffer; that
// path is pinned by TestFIFOOneMessagePerGroupInFlight.
func TestFIFOOrderedLedger(t *testing.T) {
	keys, per, instances, conc := 100, 20, 3, 8
	patience := 2 * time.Minute // for a third of the messages; the rest gets 2.5×
	if os.Getenv(sqlqueuetest.FullOrderingEnv) == "1" {
		keys, per, instances, conc = 1000, 50, 4, 64
		patience = 10 * time.Minute
	}
	const publishers = 4
	topic := testenv.UniqueName("ordered")
	queue := QueueConfig{Create: true, FIFO: true}
	ledger := orderingtest.New()

	dead := make(chan struct{}) // closed at the end: zombie handlers return
	var handlers sync.WaitGroup
	subs := make([]*Subscriber, instances)
	killed := make([]chan struct{}, instances)
	faults := make([]*faultyTransport, instances)
	for i := range subs {
		ft := &faultyTransport{next: http.DefaultTransport.(*http.Transport).Clone(), fail: map[string]int{}}
		t.Cleanup(ft.next.(*http.Transport).CloseIdleConnections)
		client := clientConfig(t, nil)
		client.AWS.HTTPClient = &http.Client{Transport: ft}
		sub, err := NewSubscriber(SubscriberConfig{
			Client:   client,
			Queue:    queue,
			WaitTime: time.Second,
			// Short, so that the killed instance's messages come back
			// soon; renewed every 2.1s while held.
			VisibilityTimeout: 3 * time.Second,
			Pipeline: receiver.Config{
				Concurrency:  conc,
				RetryDelay:   time.Second, // SQS's smallest visibility delay
				MaxAttempts:  -1,
				DrainTimeout: 200 * time.Millisecond,
			},
		}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		subs[i], killed[i], faults[i] = sub, make(chan struct{}), ft
		ch, err := sub.Subscribe(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		for range conc {
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				orderingtest.Handle(ch, ledger, i, 2000*time.Microsecond, killed[i], dead)
			}()
		}
	}
	t.Cleanup(func() {
		close(dead)
		for _, s := range subs {
			_ = s.Close()
		}
		handlers.Wait()
	})

	var pubs sync.WaitGroup
	for p := range publishers {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, nil), Queue: queue}, testLogger(t))
			if err != nil {
				t.Error(err)
				return
			}
			defer pub.Close()
			rnd := rand.New(rand.NewPCG(uint64(p), 7))
			next := make([]int, keys)
			for {
				var batch []*message.Message
				recs := map[string][]string{}
				for k := p; k < keys; k += publishers {
					key := fmt.Sprintf("key-%04d", k)
					for n := min(1+rnd.IntN(2), per-next[k]); n > 0; n-- {
						m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("%s/%d", key, next[k])))
						m.Metadata.Set(transport.MetadataOrderingKey, key)
						batch = append(batch, m)
						recs[key] = append(recs[key], m.UUID)
						next[k]++
					}
				}
				if len(batch) == 0 {
					return
				}
				free := message.NewMessage(watermill.NewUUID(), []byte("unkeyed"))
				// Recorded before the publish: the subscribers may get a
				// message before Publish returns, and the ledger must know
				// its key first.
				for key, uuids := range recs {
					ledger.Published(key, uuids...)
				}
				ledger.Published("", free.UUID)
				if err := pub.Publish(topic, append(batch, free)...); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	pubs.Wait()
	if t.Failed() {
		return
	}

	waitUntil(t, patience, "a third handled", func() bool { return ledger.Handled() >= keys*per/3 })
	// Kill instance 0: from now on every request it makes fails, so it
	// neither acks nor renews, and what it holds comes back after the
	// visibility timeout; then close it.
	close(killed[0])
	for _, op := range []string{"ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibilityBatch", "SendMessage"} {
		faults[0].setFaults(op, -1)
	}
	go func() { _ = subs[0].Close() }()
	want := ledger.Total()
	waitUntil(t, patience*5/2, "every message handled", func() bool { return ledger.Handled() >= want })
	if err := ledger.Check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages (%d keys × %d, the rest unkeyed) on %d instances × concurrency %d", want, keys, per, instances, conc)
}
