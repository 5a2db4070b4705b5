package sqlqueue

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// locks is a database's session-level locks, for the election's unit
// tests: one holder per key, taking never waits.
type locks struct{ holder map[string]*WakeSession }

func (l *locks) lead(s *WakeSession) LeadFunc {
	return func(_ context.Context, table string, take bool) (bool, error) {
		h := l.holder[table]
		switch {
		case take && (h == nil || h == s):
			l.holder[table] = s
			return true, nil
		case !take && h == s:
			delete(l.holder, table)
		}
		return false, nil
	}
}

// pass runs one election pass of s at now.
func pass(t *testing.T, s *WakeSession, l *locks, now time.Time) {
	t.Helper()
	s.now = func() time.Time { return now }
	_, cancel, err := s.Elect(context.Background(), l.lead(s))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
}

// The election's rules, step by step on a fake clock: one leader per
// queue; followers ignore notifications; at term end the leader keeps
// answering while a follower takes over; a leader whose sources stop
// claiming gives up; a pool without sources lets go.
func TestWakeElection(t *testing.T) {
	h := &hub{qs: map[wakeKey]*wakeQueue{}, sessions: map[*sql.DB]*WakeSession{}}
	dbA, dbB := &sql.DB{}, &sql.DB{}
	wa := &waiter{ch: make(chan struct{}, 1), debounce: -1}
	wb := &waiter{ch: make(chan struct{}, 1), debounce: -1}
	removeA := h.add(wakeKey{dbA, "q"}, wa)
	defer h.add(wakeKey{dbB, "q"}, wb)()
	l := &locks{holder: map[string]*WakeSession{}}
	a, b := newWakeSession(h, dbA), newWakeSession(h, dbB)
	// answered reports which pools' sources a notification on every
	// LISTEN connection woke, and has them claim.
	answered := func() (gotA, gotB bool) {
		wa.idle.Store(true)
		wb.idle.Store(true)
		h.notifyListened(dbA, "q")
		h.notifyListened(dbB, "q")
		gotA, gotB = pending(wa), pending(wb)
		wa.claimed.Store(time.Now().UnixNano())
		wb.claimed.Store(time.Now().UnixNano())
		return gotA, gotB
	}

	t0 := time.Now()
	pass(t, a, l, t0)
	pass(t, b, l, t0)
	if l.holder["q"] != a {
		t.Fatal("the first to contend should lead")
	}
	if gotA, gotB := answered(); !gotA || gotB {
		t.Fatalf("leader A answered %v, follower B answered %v; want only A", gotA, gotB)
	}

	// Term over (30s ± 25%): A lets go but keeps answering; B, due to
	// try again, takes the lead.
	t1 := t0.Add(leadTerm * 5 / 4)
	pass(t, a, l, t1)
	if l.holder["q"] != nil {
		t.Fatal("the leader should give the lock up at term end")
	}
	if gotA, _ := answered(); !gotA {
		t.Fatal("an outgoing leader should answer through its grace period")
	}
	pass(t, b, l, t1)
	if l.holder["q"] != b {
		t.Fatal("a follower due to contend should take a free lead")
	}
	// After its grace, A tries again, fails, and follows.
	t2 := t1.Add(leadGrace)
	pass(t, a, l, t2)
	if gotA, gotB := answered(); gotA || !gotB {
		t.Fatalf("after hand-over A answered %v, B answered %v; want only B", gotA, gotB)
	}

	// B's source stops claiming (paused, too busy): after leadStall B gives
	// the lead up, and A takes it at its next try.
	wb.idle.Store(true)
	h.notifyListened(dbB, "q") // fired; B's source never claims
	if !pending(wb) {
		t.Fatal("the leader's idle source should be woken")
	}
	t3 := t2.Add(leadStall + leadCheck)
	pass(t, b, l, t3)
	if l.holder["q"] != nil {
		t.Fatal("a leader whose sources do not claim should give the lead up")
	}
	pass(t, a, l, t3.Add(leadContend*5/4))
	if l.holder["q"] != a {
		t.Fatal("the other pool should take the lead a stalled leader gave up")
	}
	if gotA, gotB := answered(); !gotA || gotB {
		t.Fatalf("after the stall A answered %v, B answered %v; want only A", gotA, gotB)
	}

	// A pool with no source of the queue lets go at its next pass, which a
	// removal triggers at once.
	removeA()
	select {
	case <-kicked(a):
	default:
		t.Fatal("removing a source should kick the pool's election")
	}
	pass(t, a, l, t3.Add(leadContend*2))
	if l.holder["q"] != nil {
		t.Fatal("a pool without sources of the queue should let go of its lead")
	}

	// A session that ends forgets what it followed: with no LISTEN
	// connection there is nothing to ignore.
	h.setFollower(dbB, "q", true)
	h.endSession(dbB)
	if q := h.qs[wakeKey{dbB, "q"}]; q.follower {
		t.Fatal("an ended session left its pool following")
	}
}

// kicked returns a channel closed if s was kicked since its last pass.
func kicked(s *WakeSession) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if s.kicked {
		close(ch)
	}
	return ch
}
