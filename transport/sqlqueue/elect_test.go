package sqlqueue

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// locks is a database's session-level locks, for the election's unit
// tests: one holder per key, taking never waits.
type locks struct {
	holder map[string]*WakeSession
	calls  int // round trips
}

func (l *locks) lead(s *WakeSession) LeadFunc {
	return func(_ context.Context, take, give []string) (map[string]bool, error) {
		l.calls++
		for _, table := range give {
			if l.holder[table] == s {
				delete(l.holder, table)
			}
		}
		held := map[string]bool{}
		for _, table := range take {
			if h := l.holder[table]; h == nil || h == s {
				l.holder[table] = s
				held[table] = true
			}
		}
		return held, nil
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

// A pool's election pass is one round trip whatever its number of queues:
// queues taken together keep their terms together, and the slack brings
// steps due at nearby times into one pass.
func TestWakeElectionOneRoundTripPerPass(t *testing.T) {
	h := &hub{qs: map[wakeKey]*wakeQueue{}, sessions: map[*sql.DB]*WakeSession{}}
	dbA, dbB := &sql.DB{}, &sql.DB{}
	const queues = 50
	for i := range queues {
		table := "q" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		defer h.add(wakeKey{dbA, table}, &waiter{ch: make(chan struct{}, 1)})()
		defer h.add(wakeKey{dbB, table}, &waiter{ch: make(chan struct{}, 1)})()
	}
	la, lb := &locks{holder: map[string]*WakeSession{}}, &locks{}
	lb.holder = la.holder // one database
	a, b := newWakeSession(h, dbA), newWakeSession(h, dbB)
	t0 := time.Now()
	pass(t, a, la, t0)
	pass(t, b, lb, t0)
	if la.calls != 1 || lb.calls != 1 {
		t.Fatalf("first passes: %d and %d round trips, want 1 each", la.calls, lb.calls)
	}
	for table, holder := range la.holder {
		if holder != a {
			t.Fatalf("%s led by the second pool; the first to contend should lead every queue", table)
		}
	}
	// Ten minutes of passes every 100ms: each pass that does anything is
	// one round trip; the follower contends about every leadContend, the
	// leader hands over about every leadTerm.
	passes := 0
	for now := t0; now.Before(t0.Add(10 * time.Minute)); now = now.Add(100 * time.Millisecond) {
		pass(t, a, la, now)
		pass(t, b, lb, now)
		passes += 2
	}
	// At most one round trip per leadContend/2 per pool, whatever the
	// number of queues (per queue, it would be queues times that).
	limit := 2 * int(10*time.Minute/(leadContend/2))
	if got := la.calls + lb.calls; got > limit {
		t.Errorf("%d round trips in 10 minutes for %d queues × 2 pools, want ≤ %d", got, queues, limit)
	}
}
