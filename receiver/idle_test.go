package receiver

import (
	"testing"
	"time"

	"github.com/berth-go/berth/transport"
)

// idleCount returns how many workers wait in w.
func (w *idleWorkers) idleCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.stack)
}

// waitIdle starts n workers waiting in w, each reporting what it got (its
// index and delivery) on the returned channel, and returns once all wait.
func waitIdle(t *testing.T, w *idleWorkers, n int) <-chan [2]any {
	t.Helper()
	got := make(chan [2]any, n)
	for i := range n {
		before := w.idleCount()
		go func() { got <- [2]any{i, w.wait(newMailbox())} }()
		eventuallyInternal(t, func() bool { return w.idleCount() == before+1 })
	}
	return got
}

// The most recently idle worker is handed the next delivery; the others
// are ended by the reaper once idle for workerLinger, and close ends the
// rest and every later wait at once.
func TestIdleWorkers(t *testing.T) {
	var w idleWorkers
	if w.hand(&transport.Delivery{ID: "x"}) {
		t.Fatal("hand with no idle worker reported true")
	}
	start := time.Now()
	got := waitIdle(t, &w, 3)
	if !w.hand(&transport.Delivery{ID: "d"}) {
		t.Fatal("hand with idle workers reported false")
	}
	if r := <-got; r[0] != 2 || r[1].(*transport.Delivery).ID != "d" {
		t.Fatalf("worker %v got %v, want the last idle one (2) to get d", r[0], r[1])
	}
	for range 2 {
		if r := <-got; r[1].(*transport.Delivery) != nil {
			t.Fatalf("worker %v got %v, want nil (reaped)", r[0], r[1])
		}
	}
	if d := time.Since(start); d < workerLinger {
		t.Fatalf("workers reaped after %v, before workerLinger (%v)", d, workerLinger)
	}

	got = waitIdle(t, &w, 2)
	w.close()
	for range 2 {
		if r := <-got; r[1].(*transport.Delivery) != nil {
			t.Fatalf("worker %v got %v after close, want nil", r[0], r[1])
		}
	}
	if d := w.wait(newMailbox()); d != nil {
		t.Fatalf("wait after close returned %v, want nil", d)
	}
	if w.hand(&transport.Delivery{ID: "late"}) {
		t.Fatal("hand after close reported true")
	}
}

func eventuallyInternal(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
