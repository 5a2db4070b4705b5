package health

import (
	"time"

	"github.com/berth-go/berth/transport"
)

// Report is the health of everything a Handler watches, as served in JSON
// by every endpoint.
type Report struct {
	// Health is the worst verdict of the listeners and pings.
	Health Status `json:"health"`
	// Live is false when any listener fails liveness.
	Live bool `json:"live"`
	// Ready is false when any listener is not ready or any ping failed.
	// Without pings (on /livez) it reflects the listeners only.
	Ready bool `json:"ready"`
	// CheckedAt is when the report was made.
	CheckedAt time.Time `json:"checked_at"`
	// Listeners has one entry per listener of every source, in
	// registration order, then in the source's order.
	Listeners []ListenerReport `json:"listeners"`
	// Pings has one entry per registered Pinger; omitted on /livez.
	Pings []PingReport `json:"pings,omitempty"`
}

// ListenerReport is one listener's verdict and the state it was made from.
type ListenerReport struct {
	Source string `json:"source"` // the name the source was registered with
	Name   string `json:"name"`   // the listener's topic (and consumer group)

	Health Status `json:"health"`
	Reason Reason `json:"reason"`
	Live   bool   `json:"live"`
	Ready  bool   `json:"ready"`

	Status string `json:"status"` // transport.Status: accepting, too_busy, paused, stopped, faulted
	Loop   string `json:"loop"`   // transport.LoopState: running, backing_off, stopped, faulted

	QueueCount   int  `json:"queue_count"`
	Buffered     int  `json:"buffered"`
	InFlight     int  `json:"in_flight"`
	BatchPending int  `json:"batch_pending"`
	Latched      bool `json:"latched"`

	Faulted  bool   `json:"faulted"`         // the current receiver has faulted
	Fault    *Fault `json:"fault,omitempty"` // the current fault, or the last one after a rebuild
	Rebuilds int64  `json:"rebuilds"`        // receivers rebuilt after a fault

	LastReceive         time.Time `json:"last_receive,omitzero"`
	LastContact         time.Time `json:"last_contact,omitzero"`
	ContactFailing      bool      `json:"contact_failing"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	LastError           string    `json:"last_error,omitempty"`
	QueueMissing        bool      `json:"queue_missing"`
	Wave                int       `json:"wave"`
	StartedAt           time.Time `json:"started_at,omitzero"`
}

// Fault is a listener's recorded fault: the current one while the listener
// is faulted, the last one after the watchdog rebuilt its receiver.
type Fault struct {
	Cause string    `json:"cause"`
	At    time.Time `json:"at,omitzero"`
}

// PingReport is the outcome of one Pinger call.
type PingReport struct {
	Name       string  `json:"name"`
	Health     Status  `json:"health"` // Healthy or Unhealthy
	Reason     Reason  `json:"reason"` // ok or ping_failed
	Error      string  `json:"error,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}

// evaluator is the status-to-health mapping with its configuration.
type evaluator struct {
	cfg     Config    // with defaults
	created time.Time // anchor of the startup grace for never-started listeners
}

// verdict is the mapping's result for one state.
type verdict struct {
	health Status
	reason Reason
	live   bool
	ready  bool
}

// evaluate is the total status-to-health mapping; the first rule that
// matches wins. Keep it in step with the table in doc.go and
// docs/operations.md.
func (e *evaluator) evaluate(s transport.ListenerState, now time.Time) verdict {
	c := e.cfg
	faulted := s.Faulted || s.Status == transport.StatusFaulted || s.Loop == transport.LoopFaulted
	switch {
	case faulted:
		v := verdict{health: Unhealthy, reason: ReasonFaulted, live: true}
		// A paused listener stays alive: restarting the process would
		// undo the pause, and Resume rebuilds the receiver.
		if s.Status != transport.StatusPaused && c.FaultGrace >= 0 && !s.FaultAt.IsZero() &&
			now.Sub(s.FaultAt) > c.FaultGrace {
			v.reason, v.live = ReasonFaultNotRebuilt, false
		}
		return v
	case s.QueueMissing:
		return verdict{health: Unhealthy, reason: ReasonQueueMissing, live: true}
	}

	started := s.StartedAt
	if started.IsZero() {
		started = e.created
	}
	inGrace := c.StartupGrace > 0 && now.Sub(started) <= c.StartupGrace
	if (s.Status == transport.StatusAccepting || s.Status == transport.StatusTooBusy) &&
		c.Unreachable > 0 && s.ContactFailing && !s.LastContact.IsZero() && now.Sub(s.LastContact) >= c.Unreachable {
		return verdict{health: Unhealthy, reason: ReasonUnreachable, live: true}
	}

	switch s.Status {
	case transport.StatusStopped:
		if s.StartedAt.IsZero() && inGrace {
			return verdict{health: Degraded, reason: ReasonStarting, live: true}
		}
		return verdict{health: Unhealthy, reason: ReasonStopped, live: true}
	case transport.StatusPaused:
		return verdict{health: Degraded, reason: ReasonPaused, live: true}
	case transport.StatusTooBusy:
		return verdict{health: Degraded, reason: ReasonTooBusy, live: true, ready: true}
	case transport.StatusAccepting:
		switch {
		case c.MaxConsecutiveFailures > 0 && s.ConsecutiveFailures >= c.MaxConsecutiveFailures:
			return verdict{health: Degraded, reason: ReasonReceiveFailing, live: true}
		case s.LastReceive.IsZero() && inGrace:
			return verdict{health: Degraded, reason: ReasonStarting, live: true}
		case s.LastReceive.IsZero():
			return verdict{health: Unhealthy, reason: ReasonNotReceiving, live: true}
		case c.StaleReceive > 0 && now.Sub(s.LastReceive) > c.StaleReceive:
			return verdict{health: Unhealthy, reason: ReasonReceiveStalled, live: true}
		case s.ConsecutiveFailures > 0:
			return verdict{health: Degraded, reason: ReasonReceiveErrors, live: true, ready: true}
		}
		return verdict{health: Healthy, reason: ReasonOK, live: true, ready: true}
	}
	return verdict{health: Unhealthy, reason: ReasonUnknownStatus, live: true}
}

// listener builds the report of one listener.
func (e *evaluator) listener(source string, s transport.ListenerState, now time.Time) ListenerReport {
	v := e.evaluate(s, now)
	r := ListenerReport{
		Source:              source,
		Name:                s.Name,
		Health:              v.health,
		Reason:              v.reason,
		Live:                v.live,
		Ready:               v.ready,
		Status:              s.Status.String(),
		Loop:                s.Loop.String(),
		QueueCount:          s.QueueCount,
		Buffered:            s.Buffered,
		InFlight:            s.InFlight,
		BatchPending:        s.BatchPending,
		Latched:             s.Latched,
		Faulted:             v.reason == ReasonFaulted || v.reason == ReasonFaultNotRebuilt,
		Rebuilds:            s.Rebuilds,
		LastReceive:         s.LastReceive,
		LastContact:         s.LastContact,
		ContactFailing:      s.ContactFailing,
		ConsecutiveFailures: s.ConsecutiveFailures,
		LastError:           s.LastError,
		QueueMissing:        s.QueueMissing,
		Wave:                s.Wave,
		StartedAt:           s.StartedAt,
	}
	if r.Faulted || s.Fault != "" {
		r.Fault = &Fault{Cause: s.Fault, At: s.FaultAt}
	}
	return r
}
