package receiver_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// pingSource is a fakeSource behind a broker that can be down: claims and
// pings fail while it is, and pings succeed while it is up (or always,
// with answering: a broker that is up but refuses the claims).
type pingSource struct {
	*fakeSource
	mu        sync.Mutex
	down      bool
	answering bool // pings succeed even while claims fail
	pings     int
}

var errDown = errors.New("connection refused")

func (s *pingSource) Claim(ctx context.Context, max int) ([]*transport.Delivery, error) {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		s.fakeSource.mu.Lock()
		s.fakeSource.claims = append(s.fakeSource.claims, max)
		s.fakeSource.mu.Unlock()
		return nil, errDown
	}
	return s.fakeSource.Claim(ctx, max)
}

func (s *pingSource) Ping(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pings++
	if s.down && !s.answering {
		return errDown
	}
	return nil
}

func (s *pingSource) set(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *pingSource) pinged() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pings
}

// A loop backing off after a broker outage (a 10 to 20 s backoff here)
// claims again within about a second of the broker answering its ping,
// not after the backoff; a broker that answers pings but fails the claims
// keeps the backoff.
func TestBackoffEndsWhenTheBrokerAnswers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answering bool
	}{
		{"unreachable, then back", false},
		{"answers but refuses claims", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &pingSource{fakeSource: &fakeSource{available: 1}, down: true, answering: tc.answering}
			l := newListener(t, src, receiver.Config{ErrorBackoff: 20 * time.Second, MaxErrorDelay: 30 * time.Second})
			eventually(t, "a failed claim", func() bool { return len(src.claimLog()) >= 1 })
			eventually(t, "a ping during the backoff", func() bool { return src.pinged() >= 1 })
			src.set(false)
			healed := time.Now()
			if tc.answering {
				// Pings never failed: the backoff (10 s at least) stands.
				eventually(t, "two more pings", func() bool { return src.pinged() >= 3 })
				if n := len(src.claimLog()); n != 1 {
					t.Fatalf("%d claims within %s of the pings succeeding; the backoff should stand", n, time.Since(healed))
				}
				return
			}
			var m = make(chan struct{})
			go func() {
				defer close(m)
				select {
				case msg := <-l.Messages():
					msg.Ack()
				case <-time.After(5 * time.Second):
				}
			}()
			<-m
			if took := time.Since(healed); took > 5*time.Second || len(src.claimLog()) < 2 {
				t.Fatalf("claimed %d times; the message came %s after the broker answered, want about a second", len(src.claimLog()), took)
			}
		})
	}
}
