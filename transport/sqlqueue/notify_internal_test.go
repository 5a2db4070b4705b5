package sqlqueue

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// recorder is a notifyGate's send function that records what it sent.
type recorder struct {
	mu   sync.Mutex
	sent []string
}

func (r *recorder) send(_ context.Context, q Queue) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, q.Name)
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sent)
}

// Within one window only the first insert notifies; the others join one
// trailing notification, which close sends (once: the skipped inserts
// committed) and which is never sent for inserts that all failed.
func TestNotifyGateWindow(t *testing.T) {
	var r recorder
	g := newNotifyGate(time.Hour, watermill.NopLogger{}, r.send)
	a, b := Queue{Name: "a"}, Queue{Name: "b"}
	if notify, _ := g.begin(a); !notify {
		t.Fatal("the first insert of a queue must notify")
	}
	var tks []ticket
	for range 3 {
		notify, tk := g.begin(a)
		if notify || tk.joined == nil {
			t.Fatalf("an insert within the window notified (%v) or joined nothing", notify)
		}
		tks = append(tks, tk)
	}
	if tks[0].joined != tks[2].joined {
		t.Fatal("inserts of one window joined different trailing notifications")
	}
	// Queue b: its own window; its skipped insert fails.
	if notify, _ := g.begin(b); !notify {
		t.Fatal("the first insert of another queue must notify")
	}
	_, tb := g.begin(b)
	g.end(tb, false)
	for i, tk := range tks {
		g.end(tk, i == 1)
	}
	if n := r.count(); n != 0 {
		t.Fatalf("%d trailing notifications sent before the window ended", n)
	}
	g.close()
	if len(r.sent) != 1 || r.sent[0] != "a" {
		t.Fatalf("close sent %v, want [a]", r.sent)
	}
	if notify, _ := g.begin(a); !notify {
		t.Fatal("after close every insert must notify")
	}
}

// The trailing notification goes out on its own once the window (and its
// grace) has ended and the inserts that joined it have finished.
func TestNotifyGateTrailing(t *testing.T) {
	var r recorder
	g := newNotifyGate(200*time.Millisecond, watermill.NopLogger{}, r.send)
	defer g.close()
	q := Queue{Name: "q"}
	g.begin(q)
	notify, tk := g.begin(q)
	if notify {
		t.Skip("the machine took a whole window between two calls")
	}
	// The window ends while the insert runs: nothing goes out before it
	// finishes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		due := tk.joined.due
		g.mu.Unlock()
		if due {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the trailing notification never became due")
		}
		time.Sleep(time.Millisecond) // polling a condition, not synchronising
	}
	if n := r.count(); n != 0 {
		t.Fatalf("%d sent while the skipped insert was still running", n)
	}
	g.end(tk, true)
	for r.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the trailing notification was not sent")
		}
		time.Sleep(time.Millisecond) // polling a condition, not synchronising
	}
}

// A skipped insert's trailing notification waits two windows after the
// last notification, so that the next insert after the window, coming
// within them, carries the notification and covers it: a flow of one
// insert every half window to one window (40–80 a second at 25 ms) then
// sends no notification on its own. Due one and a half windows after,
// it went out just before that insert (here at 1.6 windows).
func TestNotifyGateNextInsertCoversTrailing(t *testing.T) {
	const w = 400 * time.Millisecond
	var r recorder
	g := newNotifyGate(w, watermill.NopLogger{}, r.send)
	q := Queue{Name: "q"}
	start := time.Now()
	notify, first := g.begin(q)
	if !notify {
		t.Fatal("the first insert of a queue must notify")
	}
	g.end(first, true)
	notify, skipped := g.begin(q)
	if notify {
		t.Skip("the machine took a whole window between two calls")
	}
	g.end(skipped, true)
	for time.Since(start) < w*16/10 {
		time.Sleep(time.Millisecond) // polling the clock: the flow's next insert is due
	}
	notify, next := g.begin(q)
	if time.Since(start) >= w*19/10 {
		t.Skip("the machine stalled past the trailing notification's due time")
	}
	if !notify {
		t.Fatal("the insert after the window did not carry the notification")
	}
	if n := r.count(); n != 0 || next.covered != skipped.joined {
		t.Fatalf("%d trailing notifications sent before the next insert; it covered %p, want %p", n, next.covered, skipped.joined)
	}
	g.end(next, true)
	g.close()
	if n := r.count(); n != 0 {
		t.Fatalf("%d trailing notifications sent, want none", n)
	}
}
