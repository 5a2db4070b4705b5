package sqlqueue

import (
	"database/sql"
	"testing"
	"time"
)

func pending(w *waiter) bool {
	select {
	case <-w.ch:
		return true
	default:
		return false
	}
}

// A notification goes to one idle source, round robin; with none idle,
// every source gets a pending wake-up.
func TestHubElectsOneIdleSource(t *testing.T) {
	h := &hub{qs: map[wakeKey]*wakeQueue{}}
	k := wakeKey{&sql.DB{}, "q"}
	ws := []*waiter{{ch: make(chan struct{}, 1)}, {ch: make(chan struct{}, 1)}, {ch: make(chan struct{}, 1)}}
	for _, w := range ws {
		defer h.add(k, w)()
	}
	ws[0].idle.Store(true)
	ws[2].idle.Store(true)
	h.notify(k)
	if !pending(ws[0]) || pending(ws[1]) || pending(ws[2]) {
		t.Fatal("first notification: want only source 0 woken")
	}
	h.notify(k)
	if pending(ws[0]) || pending(ws[1]) || !pending(ws[2]) {
		t.Fatal("second notification: want only source 2 woken (round robin over idle sources)")
	}
	for _, w := range ws {
		w.idle.Store(false)
	}
	h.notify(k)
	for i, w := range ws {
		if !pending(w) {
			t.Fatalf("none idle: source %d not woken", i)
		}
	}
	// Another pool's queue of the same name is another key.
	h.notify(wakeKey{&sql.DB{}, "q"})
	for i, w := range ws {
		if pending(w) {
			t.Fatalf("another pool's notification woke source %d", i)
		}
	}
}

// The first notification after a quiet window wakes at once (leading
// edge); those that follow within the window coalesce into one wake-up at
// its end.
func TestHubDebounces(t *testing.T) {
	h := &hub{qs: map[wakeKey]*wakeQueue{}}
	k := wakeKey{&sql.DB{}, "q"}
	a := &waiter{ch: make(chan struct{}, 1), debounce: 50 * time.Millisecond}
	b := &waiter{ch: make(chan struct{}, 1), debounce: 50 * time.Millisecond}
	a.idle.Store(true)
	b.idle.Store(true)
	defer h.add(k, a)()
	defer h.add(k, b)()
	start := time.Now()
	h.notify(k)
	if !pending(a) || pending(b) {
		t.Fatal("the first notification did not wake the first registered source at once")
	}
	for range 10 {
		h.notify(k)
	}
	if pending(a) || pending(b) {
		t.Fatal("notifications within the window woke a source before the window ended")
	}
	select {
	case <-b.ch:
	case <-a.ch:
		t.Fatal("the round robin goes on to the second source")
	case <-time.After(5 * time.Second):
		t.Fatal("no trailing wake-up")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("trailing wake-up after %s, before the 50ms window", d)
	}
	if got := b.hint.Load(); got != 10 {
		t.Fatalf("the trailing wake-up announced %d notifications, want 10", got)
	}
	h.mu.Lock()
	armed := h.qs[k].timer != nil
	h.mu.Unlock()
	if armed || pending(a) {
		t.Fatal("ten notifications in one window made more than one trailing wake-up")
	}
}

// Removing the last source stops a pending wake-up.
func TestHubRemoveStopsTimer(t *testing.T) {
	h := &hub{qs: map[wakeKey]*wakeQueue{}}
	k := wakeKey{&sql.DB{}, "q"}
	w := &waiter{ch: make(chan struct{}, 1), debounce: time.Hour}
	remove := h.add(k, w)
	h.notify(k)
	remove()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.qs) != 0 {
		t.Fatal("queue still registered")
	}
}
