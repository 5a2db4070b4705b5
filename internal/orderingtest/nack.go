package orderingtest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// OrderedNackDeadLetter checks receiver.OrderedNackDeadLetter on a
// transport: sub must be configured with it (and no MaxAttempts of 1).
// It publishes k1, k2 with one ordering key and u1 without, nacks the
// first delivery of k1 and of u1, and checks that k1 is dead-lettered at
// once (deadLetters, by UUID, returns its reason naming ordered_nack) and
// never handled again, that k2 is handled after it, and that u1 is
// retried as usual.
func OrderedNackDeadLetter(t *testing.T, pub message.Publisher, sub message.Subscriber, topic string,
	deadLetters func(t *testing.T) map[string]string) {
	t.Helper()
	msg := func(key, payload string) *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte(payload))
		if key != "" {
			m.Metadata.Set(transport.MetadataOrderingKey, key)
		}
		return m
	}
	k1, k2, u1 := msg("k", "k1"), msg("k", "k2"), msg("", "u1")
	if err := pub.Publish(topic, k1, k2, u1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		runs []string // payloads in handling order
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ch {
			p := string(m.Payload)
			mu.Lock()
			first := !slices.Contains(runs, p)
			runs = append(runs, p)
			mu.Unlock()
			if first && (p == "k1" || p == "u1") {
				m.Nack()
			} else {
				m.Ack()
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := slices.Clone(runs)
		mu.Unlock()
		reason := deadLetters(t)[k1.UUID]
		if slices.Contains(got, "k2") && count(got, "u1") >= 2 && reason != "" {
			if !strings.Contains(reason, "ordered_nack") {
				t.Fatalf("k1's dead-letter reason %q does not name ordered_nack", reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handled %v, k1's dead-letter reason %q; want k1 once and dead-lettered, then k2, and u1 twice", got, reason)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not synchronising
	}
	cancel()
	<-done // the channel closes once the subscription has stopped
	if n := count(runs, "k1"); n != 1 {
		t.Fatalf("k1 handled %d times (%v); want once, then dead-lettered", n, runs)
	}
	if slices.Index(runs, "k2") < slices.Index(runs, "k1") {
		t.Fatalf("k2 handled before k1: %v", runs)
	}
	if _, dead := deadLetters(t)[u1.UUID]; dead {
		t.Fatal("u1 (no key) dead-lettered; want it retried")
	}
}

func count(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
