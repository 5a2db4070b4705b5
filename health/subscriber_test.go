package health_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/health"
	"github.com/berth-go/berth/internal/subopt"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/mem"
	"github.com/berth-go/berth/transport/transporttest"
)

// *receiver.Subscriber, which every transport's subscriber is or wraps, is
// a Source.
var _ health.Source = (*receiver.Subscriber)(nil)

// probe GETs path and decodes the report.
func probe(t *testing.T, srv *httptest.Server, path string) (int, health.Report) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r health.Report
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, r
}

// eventually polls cond until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// TestSubscriberHealth runs the handler over a real pipeline (the in-memory
// transport): healthy once receiving, paused and resumed, a fault injected
// into delivery and rebuilt by the watchdog with nothing lost, and the
// listener gone once its Subscribe ends.
func TestSubscriberHealth(t *testing.T) {
	broker := mem.NewBroker()
	sub, err := mem.NewSubscriber(mem.SubscriberConfig{
		Broker:            broker,
		VisibilityTimeout: time.Second,
		Pipeline: receiver.Config{
			Concurrency: 2,
			RetryDelay:  -1,
			EmptyDelay:  10 * time.Millisecond,
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	h, err := health.NewHandler(health.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddSource("orders", sub); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	if code, r := probe(t, srv, "/readyz"); code != http.StatusOK || len(r.Listeners) != 0 {
		t.Fatalf("no listeners yet: %d %+v", code, r)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topic := "health-" + watermill.NewShortUUID()
	inj := transporttest.NewFaults()
	msgs, err := sub.Subscribe(subopt.With(ctx, subopt.Options{
		WrapSource: func(src transport.Source) transport.Source { return transporttest.FaultySource(src, inj) },
	}), topic)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]int{}
	var consumer sync.WaitGroup
	consumer.Go(func() {
		for m := range msgs {
			mu.Lock()
			got[m.UUID]++
			mu.Unlock()
			m.Ack()
		}
	})
	defer consumer.Wait()
	defer cancel()
	received := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return got[id] > 0
	}

	listener := func(path string) (int, health.ListenerReport) {
		code, r := probe(t, srv, path)
		if len(r.Listeners) != 1 {
			return code, health.ListenerReport{}
		}
		return code, r.Listeners[0]
	}
	eventually(t, "ready and receiving", func() bool {
		code, l := listener("/readyz")
		return code == http.StatusOK && l.Reason == health.ReasonOK && l.Name == topic
	})

	// Paused: alive, not ready; resumed: ready again.
	l := sub.Listeners()[0]
	if err := l.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if code, lr := listener("/readyz"); code != http.StatusServiceUnavailable || lr.Reason != health.ReasonPaused {
		t.Fatalf("paused: %d %+v", code, lr)
	}
	if code, _ := listener("/livez"); code != http.StatusOK {
		t.Fatalf("paused: livez %d", code)
	}
	l.Resume()
	eventually(t, "ready after resume", func() bool {
		code, lr := listener("/readyz")
		return code == http.StatusOK && lr.Reason == health.ReasonOK
	})

	// A panic in the lease gate faults the receiver; the watchdog rebuilds
	// it, health reports the rebuild and the last fault, the message
	// arrives.
	inj.Panic(transporttest.AtBegin, 1)
	msg := message.NewMessage(watermill.NewUUID(), []byte("order 1"))
	broker.Publish(topic, msg)
	eventually(t, "the message processed after the rebuild", func() bool { return received(msg.UUID) })
	if inj.Hits(transporttest.AtBegin) != 1 {
		t.Fatalf("begin faults injected: %d", inj.Hits(transporttest.AtBegin))
	}
	eventually(t, "healthy after the rebuild", func() bool {
		code, lr := listener("/healthz")
		return code == http.StatusOK && lr.Reason == health.ReasonOK && lr.Rebuilds == 1 && !lr.Faulted
	})
	_, lr := listener("/healthz")
	if lr.Fault == nil || !strings.Contains(lr.Fault.Cause, string(transporttest.AtBegin)) || lr.Fault.At.IsZero() {
		t.Errorf("last fault: %+v", lr.Fault)
	}

	// The listener is gone once its Subscribe context ends.
	cancel()
	eventually(t, "listener removed", func() bool {
		code, r := probe(t, srv, "/healthz")
		return code == http.StatusOK && len(r.Listeners) == 0
	})
}
