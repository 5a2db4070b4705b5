package health

import (
	"testing"
	"time"

	"github.com/berth-go/berth/transport"
)

// TestMapping covers the status-to-health mapping rule by rule, including the
// combinations where rule order matters.
func TestMapping(t *testing.T) {
	now := t0
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	with := func(f func(*transport.ListenerState)) transport.ListenerState {
		s := accepting("q", now)
		f(&s)
		return s
	}
	type want struct {
		health Status
		reason Reason
		live   bool
		ready  bool
	}
	var (
		ok       = want{Healthy, ReasonOK, true, true}
		starting = want{Degraded, ReasonStarting, true, false}
	)
	tests := []struct {
		name    string
		cfg     Config
		created time.Time // Handler creation; default: 10 minutes ago
		state   transport.ListenerState
		want    want
	}{
		// accepting
		{name: "accepting receiving", state: accepting("q", now), want: ok},
		{name: "accepting after a rebuild", state: with(func(s *transport.ListenerState) { s.Rebuilds = 3 }), want: ok},
		{name: "accepting, receive just within StaleReceive",
			state: with(func(s *transport.ListenerState) { s.LastReceive = ago(5 * time.Minute) }), want: ok},
		{name: "accepting, receive stalled",
			state: with(func(s *transport.ListenerState) { s.LastReceive = ago(5*time.Minute + 1) }),
			want:  want{Unhealthy, ReasonReceiveStalled, true, false}},
		{name: "accepting, stale check disabled", cfg: Config{StaleReceive: -1},
			state: with(func(s *transport.ListenerState) { s.LastReceive = ago(24 * time.Hour) }), want: ok},
		{name: "accepting, some receive failures",
			state: with(func(s *transport.ListenerState) {
				s.ConsecutiveFailures, s.Loop, s.LastError = 4, transport.LoopBackingOff, "timeout"
			}),
			want: want{Degraded, ReasonReceiveErrors, true, true}},
		{name: "accepting, failures at threshold",
			state: with(func(s *transport.ListenerState) { s.ConsecutiveFailures, s.Loop = 5, transport.LoopBackingOff }),
			want:  want{Degraded, ReasonReceiveFailing, true, false}},
		{name: "accepting, failures with a stale receive are failing, not stalled",
			state: with(func(s *transport.ListenerState) { s.ConsecutiveFailures, s.LastReceive = 50, ago(time.Hour) }),
			want:  want{Degraded, ReasonReceiveFailing, true, false}},
		{name: "accepting, a few failures with a stale receive are stalled, not ready",
			state: with(func(s *transport.ListenerState) { s.ConsecutiveFailures, s.LastReceive = 1, ago(time.Hour) }),
			want:  want{Unhealthy, ReasonReceiveStalled, true, false}},

		// broker contact
		{name: "accepting, broker silent past Unreachable while calls fail",
			state: with(func(s *transport.ListenerState) { s.LastContact, s.ContactFailing = ago(10*time.Second), true }),
			want:  want{Unhealthy, ReasonUnreachable, true, false}},
		{name: "accepting, one failure, receives fresh (an idle SQL queue): unreachable",
			state: with(func(s *transport.ListenerState) {
				s.LastContact, s.ContactFailing, s.ConsecutiveFailures = ago(time.Minute), true, 1
			}),
			want: want{Unhealthy, ReasonUnreachable, true, false}},
		{name: "accepting, calls failing but the broker answered within Unreachable",
			state: with(func(s *transport.ListenerState) { s.LastContact, s.ContactFailing = ago(9*time.Second), true }),
			want:  ok},
		{name: "accepting, broker silent long but nothing failing (idle, not asked)",
			state: with(func(s *transport.ListenerState) { s.LastContact = ago(time.Hour) }),
			want:  ok},
		{name: "accepting, unreachable check disabled", cfg: Config{Unreachable: -1},
			state: with(func(s *transport.ListenerState) { s.LastContact, s.ContactFailing = ago(time.Hour), true }),
			want:  ok},
		{name: "too busy, broker silent past Unreachable",
			state: with(func(s *transport.ListenerState) {
				s.Status, s.Latched, s.LastContact, s.ContactFailing = transport.StatusTooBusy, true, ago(time.Minute), true
			}),
			want: want{Unhealthy, ReasonUnreachable, true, false}},
		{name: "paused, broker silent: paused",
			state: with(func(s *transport.ListenerState) {
				s.Status, s.LastContact, s.ContactFailing = transport.StatusPaused, ago(time.Minute), true
			}),
			want: want{Degraded, ReasonPaused, true, false}},

		{name: "accepting, failure threshold disabled", cfg: Config{MaxConsecutiveFailures: -1},
			state: with(func(s *transport.ListenerState) { s.ConsecutiveFailures = 1000 }),
			want:  want{Degraded, ReasonReceiveErrors, true, true}},
		{name: "accepting, custom failure threshold", cfg: Config{MaxConsecutiveFailures: 2},
			state: with(func(s *transport.ListenerState) { s.ConsecutiveFailures = 2 }),
			want:  want{Degraded, ReasonReceiveFailing, true, false}},

		// startup grace
		{name: "starting, not yet received, within grace",
			state: with(func(s *transport.ListenerState) { s.StartedAt, s.LastReceive = ago(59*time.Second), time.Time{} }),
			want:  starting},
		{name: "started at the grace boundary",
			state: with(func(s *transport.ListenerState) { s.StartedAt, s.LastReceive = ago(time.Minute), time.Time{} }),
			want:  starting},
		{name: "never received after the grace",
			state: with(func(s *transport.ListenerState) { s.StartedAt, s.LastReceive = ago(time.Minute+1), time.Time{} }),
			want:  want{Unhealthy, ReasonNotReceiving, true, false}},
		{name: "starting with receive failures over the threshold",
			state: with(func(s *transport.ListenerState) {
				s.StartedAt, s.LastReceive, s.ConsecutiveFailures = ago(time.Second), time.Time{}, 7
			}),
			want: want{Degraded, ReasonReceiveFailing, true, false}},
		{name: "starting, no StartedAt, grace from handler creation", created: ago(30 * time.Second),
			state: with(func(s *transport.ListenerState) { s.StartedAt, s.LastReceive = time.Time{}, time.Time{} }),
			want:  starting},
		{name: "no grace", cfg: Config{StartupGrace: -1},
			state: with(func(s *transport.ListenerState) { s.StartedAt, s.LastReceive = ago(time.Millisecond), time.Time{} }),
			want:  want{Unhealthy, ReasonNotReceiving, true, false}},
		{name: "custom grace", cfg: Config{StartupGrace: 5 * time.Minute},
			state: with(func(s *transport.ListenerState) { s.StartedAt, s.LastReceive = ago(4*time.Minute), time.Time{} }),
			want:  starting},

		// too busy: degraded, alive and ready
		{name: "too busy",
			state: with(func(s *transport.ListenerState) {
				s.Status, s.Latched, s.QueueCount, s.Buffered, s.InFlight = transport.StatusTooBusy, true, 1200, 32, 1168
			}),
			want: want{Degraded, ReasonTooBusy, true, true}},
		{name: "too busy does not count as stalled",
			state: with(func(s *transport.ListenerState) { s.Status, s.LastReceive = transport.StatusTooBusy, ago(time.Hour) }),
			want:  want{Degraded, ReasonTooBusy, true, true}},

		// paused: alive, not ready
		{name: "paused",
			state: with(func(s *transport.ListenerState) { s.Status, s.Loop = transport.StatusPaused, transport.LoopStopped }),
			want:  want{Degraded, ReasonPaused, true, false}},
		{name: "paused, never received",
			state: with(func(s *transport.ListenerState) { s.Status, s.LastReceive = transport.StatusPaused, time.Time{} }),
			want:  want{Degraded, ReasonPaused, true, false}},

		// stopped: alive, not ready
		{name: "stopped after running",
			state: with(func(s *transport.ListenerState) { s.Status, s.Loop = transport.StatusStopped, transport.LoopStopped }),
			want:  want{Unhealthy, ReasonStopped, true, false}},
		{name: "zero state, handler just created", created: ago(time.Second),
			state: transport.ListenerState{Name: "q"}, want: starting},
		{name: "zero state after the grace",
			state: transport.ListenerState{Name: "q"}, want: want{Unhealthy, ReasonStopped, true, false}},

		// faulted: unhealthy and unready at once; not live after FaultGrace
		{name: "faulted status",
			state: with(func(s *transport.ListenerState) {
				s.Status, s.Loop, s.Faulted, s.Fault, s.FaultAt = transport.StatusFaulted, transport.LoopFaulted, true, "nack: panic", ago(time.Second)
			}),
			want: want{Unhealthy, ReasonFaulted, true, false}},
		{name: "faulted at the grace boundary",
			state: with(func(s *transport.ListenerState) {
				s.Status, s.Faulted, s.FaultAt = transport.StatusFaulted, true, ago(time.Minute)
			}),
			want: want{Unhealthy, ReasonFaulted, true, false}},
		{name: "fault not rebuilt",
			state: with(func(s *transport.ListenerState) {
				s.Status, s.Faulted, s.FaultAt = transport.StatusFaulted, true, ago(time.Minute+1)
			}),
			want: want{Unhealthy, ReasonFaultNotRebuilt, false, false}},
		{name: "fault flag while status still accepting",
			state: with(func(s *transport.ListenerState) { s.Faulted, s.FaultAt = true, ago(time.Second) }),
			want:  want{Unhealthy, ReasonFaulted, true, false}},
		{name: "fault flag while too busy, not rebuilt",
			state: with(func(s *transport.ListenerState) {
				s.Status, s.Latched, s.Faulted, s.FaultAt = transport.StatusTooBusy, true, true, ago(time.Hour)
			}),
			want: want{Unhealthy, ReasonFaultNotRebuilt, false, false}},
		{name: "loop faulted only",
			state: with(func(s *transport.ListenerState) { s.Loop = transport.LoopFaulted }),
			want:  want{Unhealthy, ReasonFaulted, true, false}},
		{name: "faulted without a time stays live",
			state: with(func(s *transport.ListenerState) { s.Status, s.Faulted = transport.StatusFaulted, true }),
			want:  want{Unhealthy, ReasonFaulted, true, false}},
		{name: "paused and faulted stays live",
			state: with(func(s *transport.ListenerState) {
				s.Status, s.Faulted, s.FaultAt = transport.StatusPaused, true, ago(time.Hour)
			}),
			want: want{Unhealthy, ReasonFaulted, true, false}},
		{name: "fault liveness disabled", cfg: Config{FaultGrace: -1},
			state: with(func(s *transport.ListenerState) {
				s.Status, s.Faulted, s.FaultAt = transport.StatusFaulted, true, ago(time.Hour)
			}),
			want: want{Unhealthy, ReasonFaulted, true, false}},
		{name: "custom fault grace", cfg: Config{FaultGrace: time.Second},
			state: with(func(s *transport.ListenerState) {
				s.Status, s.Faulted, s.FaultAt = transport.StatusFaulted, true, ago(2*time.Second)
			}),
			want: want{Unhealthy, ReasonFaultNotRebuilt, false, false}},
		{name: "fault wins over queue missing",
			state: with(func(s *transport.ListenerState) { s.Faulted, s.FaultAt, s.QueueMissing = true, ago(time.Second), true }),
			want:  want{Unhealthy, ReasonFaulted, true, false}},

		// queue missing: its own reason, whatever the status
		{name: "queue missing",
			state: with(func(s *transport.ListenerState) {
				s.QueueMissing, s.ConsecutiveFailures, s.Loop, s.LastError = true, 9, transport.LoopBackingOff, "berth: queue does not exist"
			}),
			want: want{Unhealthy, ReasonQueueMissing, true, false}},
		{name: "queue missing at startup",
			state: with(func(s *transport.ListenerState) {
				s.QueueMissing, s.StartedAt, s.LastReceive = true, ago(time.Second), time.Time{}
			}),
			want: want{Unhealthy, ReasonQueueMissing, true, false}},
		{name: "queue missing while paused",
			state: with(func(s *transport.ListenerState) { s.QueueMissing, s.Status = true, transport.StatusPaused }),
			want:  want{Unhealthy, ReasonQueueMissing, true, false}},

		// totality
		{name: "unknown status",
			state: with(func(s *transport.ListenerState) { s.Status = transport.Status(42) }),
			want:  want{Unhealthy, ReasonUnknownStatus, true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			created := tt.created
			if created.IsZero() {
				created = ago(10 * time.Minute)
			}
			e := evaluator{cfg: tt.cfg.WithDefaults(), created: created}
			v := e.evaluate(tt.state, now)
			got := want(v)
			if got != tt.want {
				t.Errorf("evaluate = %+v, want %+v", got, tt.want)
			}
			// Invariants of the mapping.
			if v.health == Unhealthy && v.ready {
				t.Errorf("unhealthy but ready")
			}
			if v.health == Healthy && (!v.ready || !v.live) {
				t.Errorf("healthy but not ready or not live")
			}
		})
	}
}

// TestMappingTotal checks that every transport.Status and LoopState the
// transport package names has a verdict of its own, with and without a fault.
func TestMappingTotal(t *testing.T) {
	e := evaluator{cfg: Config{}.WithDefaults(), created: t0.Add(-time.Hour)}
	for st := transport.StatusStopped; st <= transport.StatusFaulted; st++ {
		if st.String() == "unknown" {
			t.Fatalf("status %d has no name", st)
		}
		for lp := transport.LoopStopped; lp <= transport.LoopFaulted; lp++ {
			for _, faulted := range []bool{false, true} {
				s := accepting("q", t0)
				s.Status, s.Loop, s.Faulted = st, lp, faulted
				v := e.evaluate(s, t0)
				if v.reason == ReasonUnknownStatus || v.reason == "" {
					t.Errorf("status %s loop %s faulted %v: reason %q", st, lp, faulted, v.reason)
				}
				isFault := st == transport.StatusFaulted || lp == transport.LoopFaulted || faulted
				if isFault != (v.reason == ReasonFaulted) {
					t.Errorf("status %s loop %s faulted %v: reason %q", st, lp, faulted, v.reason)
				}
			}
		}
	}
}

func TestStatusText(t *testing.T) {
	for _, s := range []Status{Healthy, Degraded, Unhealthy} {
		b, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var got Status
		if err := got.UnmarshalText(b); err != nil || got != s {
			t.Errorf("round trip %v: got %v, %v", s, got, err)
		}
	}
	if Status(9).String() != "unknown" {
		t.Errorf("Status(9) = %q", Status(9).String())
	}
	var s Status
	if err := s.UnmarshalText([]byte("fine")); err == nil {
		t.Errorf("UnmarshalText(fine) succeeded")
	}
}
