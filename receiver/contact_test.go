package receiver_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// parkedSource answers every Claim empty without its broker, as an idle
// SQL queue does, reports its own contact, and pings through a broker that
// may be blackholed (Ping hangs until its context ends).
type parkedSource struct {
	*fakeSource
	blackhole atomic.Bool
	pings     atomic.Int64
	claims    atomic.Int64
	last      atomic.Int64
}

func (s *parkedSource) Claim(context.Context, int) ([]*transport.Delivery, error) {
	s.claims.Add(1)
	return nil, nil
}

func (s *parkedSource) Ping(ctx context.Context) error {
	s.pings.Add(1)
	if s.blackhole.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	s.last.Store(time.Now().UnixNano())
	return nil
}

func (s *parkedSource) LastContact() time.Time {
	if ns := s.last.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// A listener whose claims never reach the broker still learns, by pinging
// every ContactInterval, that the broker stopped answering: its state says
// ContactFailing with LastContact frozen, although every Claim "succeeds"
// (LastReceive stays fresh). When the broker answers again, the next ping
// clears it.
func TestContactFailingWhileClaimsAnswerLocally(t *testing.T) {
	src := &parkedSource{fakeSource: &fakeSource{}}
	l := newListener(t, src, receiver.Config{ContactInterval: 50 * time.Millisecond, EmptyDelay: 5 * time.Millisecond})
	defer l.Close(context.Background())
	eventually(t, "a first ping", func() bool { return !l.State().LastContact.IsZero() })
	if l.State().ContactFailing {
		t.Fatal("failing while the broker answers")
	}
	src.blackhole.Store(true)
	cut := time.Now()
	eventually(t, "contact failing", func() bool { return l.State().ContactFailing })
	s := l.State()
	if s.LastContact.After(cut) {
		t.Fatalf("LastContact %s after the blackhole began (%s)", s.LastContact, cut)
	}
	if s.LastReceive.Before(cut) || s.ConsecutiveFailures != 0 {
		t.Fatalf("claims should still succeed locally: %+v", s)
	}
	src.blackhole.Store(false)
	eventually(t, "contact again", func() bool {
		s := l.State()
		return !s.ContactFailing && s.LastContact.After(cut)
	})
}

// Without pings (ContactInterval negative), nothing is pinged.
func TestContactIntervalNegativeDisablesPings(t *testing.T) {
	src := &parkedSource{fakeSource: &fakeSource{}}
	l := newListener(t, src, receiver.Config{ContactInterval: -1, EmptyDelay: 5 * time.Millisecond})
	// 40 claims at EmptyDelay apart: 200ms, four ContactIntervals of the
	// test above.
	eventually(t, "40 claims", func() bool { return src.claims.Load() >= 40 })
	_ = l.Close(context.Background())
	if n := src.pings.Load(); n != 0 {
		t.Fatalf("%d pings with ContactInterval < 0", n)
	}
}

// A Claim that does not return (a blackholed connection, a frozen broker)
// counts as failing once it is a second past its long-poll wait, for a
// source that is not a Pinger as well.
type hungSource struct {
	*fakeSource
	release chan struct{}
}

func (s *hungSource) Claim(ctx context.Context, _ int) ([]*transport.Delivery, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return nil, nil
}

func TestContactFailingOnHungClaim(t *testing.T) {
	src := &hungSource{fakeSource: &fakeSource{}, release: make(chan struct{})}
	l := newListener(t, src, receiver.Config{})
	start := time.Now()
	eventually(t, "contact failing", func() bool { return l.State().ContactFailing })
	if d := time.Since(start); d < time.Second {
		t.Fatalf("failing after %s, before the claim was a second late", d)
	}
	close(src.release)
	eventually(t, "contact again", func() bool {
		s := l.State()
		return !s.ContactFailing && !s.LastContact.IsZero()
	})
	_ = l.Close(context.Background())
}

// outageSource fails Claims and pings while down; once up, its Claim is a
// long poll that holds until released.
type outageSource struct {
	*fakeSource
	down    atomic.Bool
	release chan struct{}
}

func (s *outageSource) Claim(ctx context.Context, _ int) ([]*transport.Delivery, error) {
	if s.down.Load() {
		return nil, errors.New("connection refused")
	}
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return nil, nil
}

func (s *outageSource) Ping(context.Context) error {
	if s.down.Load() {
		return errors.New("connection refused")
	}
	return nil
}

// After an outage, the receive failures stop counting (so receive_failing
// clears) as soon as a ping succeeds after failing, not when the next Claim
// returns: that may be a long poll answering at the end of its wait.
func TestOutageFailuresClearWhenPingAnswers(t *testing.T) {
	src := &outageSource{fakeSource: &fakeSource{}, release: make(chan struct{})}
	src.down.Store(true)
	l := newListener(t, src, receiver.Config{ContactInterval: 50 * time.Millisecond, ErrorBackoff: 10 * time.Millisecond, MaxErrorDelay: 2 * time.Second})
	eventually(t, "5 receive failures", func() bool { return l.State().ConsecutiveFailures >= 5 })
	src.down.Store(false)
	eventually(t, "failures cleared while the claim still polls", func() bool {
		s := l.State()
		return s.ConsecutiveFailures == 0 && !s.ContactFailing
	})
	close(src.release)
	_ = l.Close(context.Background())
}

// refusingSource's broker answers pings but refuses every Claim (a
// permission taken away): the failures keep counting, so health reports
// receive_failing, however often the listener pings.
type refusingSource struct {
	*fakeSource
	pings atomic.Int64
}

func (s *refusingSource) Claim(context.Context, int) ([]*transport.Delivery, error) {
	return nil, errors.New("permission denied")
}

func (s *refusingSource) Ping(context.Context) error {
	s.pings.Add(1)
	return nil
}

func TestClaimsRefusedWhilePingsAnswerKeepFailing(t *testing.T) {
	src := &refusingSource{fakeSource: &fakeSource{}}
	l := newListener(t, src, receiver.Config{ContactInterval: 50 * time.Millisecond, ErrorBackoff: time.Millisecond, MaxErrorDelay: 20 * time.Millisecond})
	eventually(t, "10 failures with pings between them", func() bool {
		return l.State().ConsecutiveFailures >= 10 && src.pings.Load() >= 3
	})
	_ = l.Close(context.Background())
}
