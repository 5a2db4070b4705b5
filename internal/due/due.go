// Package due holds Berth's one set of future due times: the retries a
// receive loop or a source issued itself, so that it looks for each when it
// falls due instead of at its next poll.
package due

import (
	"sync"
	"sync/atomic"
	"time"
)

// Cap is the most due times a Set keeps; a time added to a full set is
// dropped (it is found by the ordinary polling, as before).
const Cap = 1024

// A Set holds future times, the earliest first. The zero value is empty and
// ready. Its methods are safe for concurrent use; Len costs one atomic load,
// so callers can skip the rest while nothing is pending.
type Set struct {
	n  atomic.Int32
	mu sync.Mutex
	h  []int64 // a min-heap of UnixNano
}

// Len returns how many times the set holds.
func (s *Set) Len() int { return int(s.n.Load()) }

// Add records t and reports whether it is now the earliest.
func (s *Set) Add(t time.Time) bool {
	v := t.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.h) >= Cap {
		return false
	}
	s.h = append(s.h, v)
	i := len(s.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s.h[p] <= s.h[i] {
			break
		}
		s.h[p], s.h[i] = s.h[i], s.h[p]
		i = p
	}
	s.n.Store(int32(len(s.h)))
	return i == 0
}

// Next returns the earliest time, and false when the set is empty.
func (s *Set) Next() (time.Time, bool) {
	if s.Len() == 0 {
		return time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.h) == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, s.h[0]), true
}

// DropUntil removes every time at or before t.
func (s *Set) DropUntil(t time.Time) {
	if s.Len() == 0 {
		return
	}
	v := t.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.h) > 0 && s.h[0] <= v {
		last := len(s.h) - 1
		s.h[0] = s.h[last]
		s.h = s.h[:last]
		s.down()
	}
	if len(s.h) == 0 {
		s.h = nil
	}
	s.n.Store(int32(len(s.h)))
}

// down restores the heap from the root. s.mu must be held.
func (s *Set) down() {
	i, n := 0, len(s.h)
	for {
		m, l, r := i, 2*i+1, 2*i+2
		if l < n && s.h[l] < s.h[m] {
			m = l
		}
		if r < n && s.h[r] < s.h[m] {
			m = r
		}
		if m == i {
			return
		}
		s.h[i], s.h[m] = s.h[m], s.h[i]
		i = m
	}
}
