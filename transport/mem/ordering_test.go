package mem_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/orderingtest"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/mem"
)

func keyed(key, payload string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(payload))
	if key != "" {
		m.Metadata.Set(transport.MetadataOrderingKey, key)
	}
	return m
}

// TestOrderedLedger is the SQL kit's OrderedPerKeyAcrossInstances on
// mem://: several publishers, 3 subscribers of one consumer group with
// concurrency 8, random handler times and nacks, one subscriber killed
// mid-run (it stops renewing; its handlers never settle). Per key, handler
// runs never overlap and follow publish order; nothing is lost.
func TestOrderedLedger(t *testing.T) {
	const (
		keys, per, instances, conc, publishers = 100, 20, 3, 8, 4
		topic, group                           = "ordered", "g"
	)
	b := mem.NewBroker()
	b.Ensure(topic, group)
	ledger := orderingtest.New()
	dead := make(chan struct{})
	var handlers sync.WaitGroup
	subs := make([]*mem.Subscriber, instances)
	killed := make([]chan struct{}, instances)
	for i := range subs {
		cfg := mem.SubscriberConfig{Broker: b, ConsumerGroup: group, VisibilityTimeout: time.Second}
		cfg.Pipeline.Concurrency = conc
		cfg.Pipeline.RetryDelay = 5 * time.Millisecond
		cfg.Pipeline.MaxAttempts = -1
		cfg.Pipeline.DrainTimeout = 200 * time.Millisecond
		cfg.Pipeline.EmptyDelay = 20 * time.Millisecond
		sub, err := mem.NewSubscriber(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		subs[i], killed[i] = sub, make(chan struct{})
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
			pub, err := mem.NewPublisher(mem.PublisherConfig{Broker: b}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			rnd := rand.New(rand.NewPCG(uint64(p), 7))
			next := make([]int, keys)
			for {
				var batch []*message.Message
				recs := map[string][]string{}
				for k := p; k < keys; k += publishers {
					key := fmt.Sprintf("key-%04d", k)
					for n := min(1+rnd.IntN(2), per-next[k]); n > 0; n-- {
						m := keyed(key, fmt.Sprintf("%s/%d", key, next[k]))
						batch = append(batch, m)
						recs[key] = append(recs[key], m.UUID)
						next[k]++
					}
				}
				if len(batch) == 0 {
					return
				}
				free := keyed("", "unkeyed")
				// Recorded before the publish: mem hands messages out at
				// once, and the ledger must know their keys first.
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

	waitUntil(t, "a third handled", func() bool { return ledger.Handled() >= keys*per/3 })
	close(killed[0])
	go func() { _ = subs[0].Close() }()
	want := ledger.Total()
	waitUntil(t, "every message handled", func() bool { return ledger.Handled() >= want })
	if err := ledger.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestOrderedBroker pins the broker's per-key rules on one source: only a
// key's head is handed out, a delayed head blocks its key, settling the
// head (ack or dead letter) unblocks it, unkeyed messages are unaffected.
func TestOrderedBroker(t *testing.T) {
	b := mem.NewBroker()
	pub, _ := mem.NewPublisher(mem.PublisherConfig{Broker: b}, nil)
	sub, err := mem.NewSubscriber(mem.SubscriberConfig{Broker: b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	a1 := keyed("a", "a1")
	a1.Metadata.Set(mem.MetadataDelay, "1h")
	if err := pub.Publish("t", a1, keyed("a", "a2"), keyed("b", "b1"), keyed("b", "b2"), keyed("", "u1")); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < 3 {
		m := <-ch
		got[string(m.Payload)] = true
		if string(m.Payload) == "a2" {
			t.Fatal("a2 overtook its delayed head a1")
		}
		if string(m.Payload) == "b2" && !got["b1"] {
			t.Fatal("b2 before b1")
		}
		m.Ack()
	}
	if !got["b1"] || !got["b2"] || !got["u1"] {
		t.Fatalf("handled %v; want b1, b2, u1", got)
	}
	waitUntil(t, "the acks settled", func() bool { return b.Stats("t", "").Leased == 0 })
	if s := b.Stats("t", ""); s.Delayed != 1 || s.Blocked != 1 || s.Ready != 0 {
		t.Fatalf("stats = %+v; want a1 delayed, a2 blocked behind it", s)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not synchronising
	}
}

// ordered_nack=dead_letter: a nacked keyed message is dead-lettered at
// once and its key moves on; an unkeyed one is retried.
func TestOrderedNackDeadLetter(t *testing.T) {
	b := mem.NewBroker()
	pub, _ := mem.NewPublisher(mem.PublisherConfig{Broker: b}, nil)
	cfg := mem.SubscriberConfig{Broker: b}
	cfg.Pipeline.OrderedNack = receiver.OrderedNackDeadLetter
	cfg.Pipeline.RetryDelay = time.Millisecond
	sub, err := mem.NewSubscriber(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	orderingtest.OrderedNackDeadLetter(t, pub, sub, "t", func(*testing.T) map[string]string {
		out := map[string]string{}
		for _, d := range b.DeadLetters("t", "") {
			out[d.UUID] = d.Reason
		}
		return out
	})
}
