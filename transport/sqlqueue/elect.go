package sqlqueue

import (
	"context"
	"database/sql"
	"sync"
	"time"

	ibackoff "github.com/berth-go/berth/internal/backoff"
)

// Wake-up leadership timing. A leader answers a queue's notifications for
// about leadTerm, then gives the leadership up (so that, under light load,
// the work rotates among processes rather than staying with the first one)
// and keeps answering for leadGrace while the others contend: every
// follower tries to take a queue's leadership about every leadContend, so
// within leadGrace one of them has tried. When nobody took it, the old
// leader takes it back. A follower finds rows by its poll meanwhile, so a
// leader that dies (the database drops its lock with its session) costs at
// most a poll interval of latency until a follower leads.
const (
	leadTerm    = 30 * time.Second
	leadContend = 3 * time.Second
	leadGrace   = 5 * time.Second // > leadContend plus its jitter
	// A leader whose sources have not claimed for leadStall after a
	// wake-up (paused, too busy, buffer full) gives the leadership up; it
	// checks every leadCheck. Long enough that a claim slowed by a busy
	// machine does not hand the lead around; a follower polls meanwhile.
	leadStall = 3 * time.Second
	leadCheck = time.Second
	// leadSlack: a pass also runs the steps due within leadSlack, so that
	// the queues of a pool fall into step and each pass is one round trip
	// for all of them (with one jitter per pass, queues taken together
	// keep their terms together).
	leadSlack = leadContend / 2
)

// WakeSession is the engine's side of one pool's LISTEN connection: it
// feeds notifications to the process-wide hub and runs the pool's part in
// the wake-up election of each queue that a source of the pool consumes
// (see localWake). A Notifier gets one per connection.
type WakeSession struct {
	hub *hub
	db  *sql.DB
	now func() time.Time

	// queues is owned by the Listen goroutine.
	queues map[string]*leadState

	mu     sync.Mutex
	cancel context.CancelFunc // ends the current wait; nil when not waiting
	kicked bool               // Elect must not wait
}

// leadState is a pool's standing in the election of one queue.
type leadState struct {
	held     bool      // the connection holds the lock: leader
	outgoing bool      // gave the lock up at term end; still answering
	next     time.Time // held: term end; otherwise: the next try
}

func newWakeSession(h *hub, db *sql.DB) *WakeSession {
	s := &WakeSession{hub: h, db: db, now: time.Now, queues: map[string]*leadState{}}
	h.mu.Lock()
	h.sessions[db] = s
	h.mu.Unlock()
	return s
}

// endSession forgets db's session and its election results: its
// connection, and with it every lock it held, is gone.
func (h *hub) endSession(db *sql.DB) {
	h.mu.Lock()
	delete(h.sessions, db)
	h.mu.Unlock()
	h.resetFollowers(db)
}

// Listening reports whether, after the last Elect, the connection should
// receive notifications: it leads a queue, is giving one up, or has not
// lost an election yet. A connection that only follows need not listen,
// and should not: the database signals every listening session on each
// notifying commit, whatever the channel.
func (s *WakeSession) Listening() bool {
	for _, st := range s.queues {
		if st.held || st.outgoing || st.next.IsZero() {
			return true
		}
	}
	return false
}

// Listened tells the session its connection has just started listening:
// notifications sent before are lost, so every source of the pool is woken
// once.
func (s *WakeSession) Listened() { s.hub.notifyPool(s.db) }

// Wake records a notification for queueTable, unless another pool leads it.
func (s *WakeSession) Wake(queueTable string) { s.hub.notifyListened(s.db, queueTable) }

func (s *WakeSession) kick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kicked = true
	if s.cancel != nil {
		s.cancel()
	}
}

// Elect runs this pool's election pass with lead (which runs on the LISTEN
// connection: one round trip for every queue whose step is due), then
// returns the context to wait for the next notification in: it ends when
// the next pass is due or the set of queues to lead changed. An error from
// lead is the connection's: Listen returns it.
func (s *WakeSession) Elect(ctx context.Context, lead LeadFunc) (context.Context, context.CancelFunc, error) {
	s.mu.Lock()
	s.kicked = false
	s.cancel = nil
	s.mu.Unlock()

	wanted := s.hub.leadable(s.db)
	now := s.now()
	term, contend := ibackoff.Spread(leadTerm), ibackoff.Spread(leadContend) // one draw per pass
	var take, give []string
	for table, st := range s.queues {
		if wanted[table] {
			continue
		}
		delete(s.queues, table)
		if st.held {
			give = append(give, table)
		}
	}
	for table := range wanted {
		st := s.queues[table]
		if st == nil {
			st = &leadState{}
			s.queues[table] = st
		}
		switch {
		case st.held && s.hub.unanswered(s.db, table, now) > leadStall:
			// Not answering: give up the rest of the term, and let the
			// others contend before trying again.
			give = append(give, table)
			*st = leadState{next: now.Add(contend)}
			s.hub.setFollower(s.db, table, true)
		case now.Before(st.next.Add(-leadSlack)):
			// not due
		case st.held: // term over: let the others contend, answering meanwhile
			give = append(give, table)
			*st = leadState{outgoing: true, next: now.Add(leadGrace)}
		default:
			take = append(take, table)
		}
	}
	if len(take)+len(give) > 0 {
		held, err := lead(ctx, take, give)
		if err != nil {
			return nil, nil, err
		}
		for _, table := range take {
			st := s.queues[table]
			if held[table] {
				*st = leadState{held: true, next: now.Add(term)}
			} else {
				*st = leadState{next: now.Add(contend)}
			}
			s.hub.setFollower(s.db, table, !held[table])
		}
	}
	wait := leadTerm
	for _, st := range s.queues {
		wait = min(wait, st.next.Sub(now))
		if st.held {
			wait = min(wait, leadCheck)
		}
	}

	wctx, cancel := context.WithTimeout(ctx, max(wait, time.Millisecond))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kicked {
		cancel() // kicked during the pass: run again at once
	}
	s.cancel = cancel
	return wctx, cancel, nil
}
