package health

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/berth-go/berth/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the fake clock's start.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeClock is a settable Clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After is never called by the health handler.
func (c *fakeClock) After(time.Duration) <-chan time.Time { return nil }

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeSource returns whatever states were last set.
type fakeSource struct {
	mu     sync.Mutex
	states []transport.ListenerState
}

func (s *fakeSource) Set(states ...transport.ListenerState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states = states
}

func (s *fakeSource) ListenerStates() []transport.ListenerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]transport.ListenerState(nil), s.states...)
}

// accepting is a healthy listener at time now.
func accepting(name string, now time.Time) transport.ListenerState {
	return transport.ListenerState{
		Name:        name,
		Status:      transport.StatusAccepting,
		Loop:        transport.LoopRunning,
		StartedAt:   now.Add(-10 * time.Minute),
		LastReceive: now.Add(-time.Second),
		LastContact: now.Add(-time.Second),
		Wave:        1,
	}
}
