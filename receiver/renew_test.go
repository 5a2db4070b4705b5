package receiver_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// racingSource renews every 5 ms; the first renewal of a delivery it is
// told about waits until the test lets it go, then reports that delivery's
// lease lost, as a row deleted by an ack in between reads.
type racingSource struct {
	*gateSource
	calls   atomic.Int64
	mu      sync.Mutex
	target  string        // the delivery whose renewal waits and fails
	waiting chan struct{} // closed when that renewal waits
	proceed chan struct{} // closed by the test
}

func (*racingSource) RenewInterval() time.Duration { return 5 * time.Millisecond }

func (s *racingSource) Renew(_ context.Context, ds []*transport.Delivery) error {
	defer s.calls.Add(1)
	s.mu.Lock()
	target := s.target
	s.mu.Unlock()
	for _, d := range ds {
		if d.ID == target {
			close(s.waiting)
			<-s.proceed
			return errors.Join(fmt.Errorf("row %s: %w", d.ID, transport.ErrLeaseLost))
		}
	}
	return nil
}

// errorLogger counts Error calls.
type errorLogger struct {
	watermill.NopLogger
	mu   sync.Mutex
	msgs []string
}

func (l *errorLogger) Error(msg string, _ error, _ watermill.LogFields) {
	l.mu.Lock()
	l.msgs = append(l.msgs, msg)
	l.mu.Unlock()
}

func (l *errorLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }

func (l *errorLogger) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// A renewal that finds a row gone because its ack settled it after the
// renewal took its list is no error; a lost lease of a message still held
// is one.
func TestRenewalRacingAnAckIsNoError(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ackFirst  bool
		wantError bool
	}{
		{"acked meanwhile", true, false},
		{"still held", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &racingSource{gateSource: newGateSource(), target: "m", waiting: make(chan struct{}), proceed: make(chan struct{})}
			logger := &errorLogger{}
			st, err := receiver.NewStage(receiver.StageParams{Source: src, Config: receiver.Config{Concurrency: 2}, Logger: logger})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = st.Close(ctx)
			}()
			// "n" stays held, so that renewals go on after the one that waits.
			st.Push([]*transport.Delivery{{ID: "m", Attempt: 1, Raw: "m"}, {ID: "n", Attempt: 1, Raw: "n"}})
			got := map[string]*message.Message{}
			for range 2 {
				select {
				case m := <-st.Out:
					got[m.UUID] = m
				case <-time.After(10 * time.Second):
					t.Fatal("no message")
				}
			}
			defer got["n"].Ack()
			<-src.waiting // the renewal took its list and waits
			if tc.ackFirst {
				got["m"].Ack()
				poll(t, func() bool { return st.Holding() == 1 })
			}
			src.mu.Lock()
			src.target = "" // later renewals succeed
			src.mu.Unlock()
			calls := src.calls.Load()
			close(src.proceed)
			// The renewal's outcome is reported before the next renewal.
			poll(t, func() bool { return src.calls.Load() >= calls+2 })
			errs := logger.errors()
			if tc.wantError != (len(errs) > 0) {
				t.Fatalf("errors logged: %v; want some: %v", errs, tc.wantError)
			}
			if !tc.ackFirst {
				got["m"].Ack()
			}
		})
	}
}

func poll(t *testing.T, cond func() bool) { t.Helper(); eventually(t, "the condition", cond) }
