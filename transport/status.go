package transport

import "time"

// Status is a listener's observable state.
type Status int32

const (
	// StatusStopped: not started, or stopped by Close.
	StatusStopped Status = iota
	// StatusAccepting: the receive loop is fetching.
	StatusAccepting
	// StatusTooBusy: QueueCount is above the back-pressure maximum; the loop
	// stops fetching until it falls to the restart threshold.
	StatusTooBusy
	// StatusPaused: paused on purpose with Pause; stays so until Resume.
	StatusPaused
	// StatusFaulted: the receiver failed terminally; the watchdog (or the
	// next Start) rebuilds it.
	StatusFaulted
)

var statusNames = [...]string{"stopped", "accepting", "too_busy", "paused", "faulted"}

// String returns the status as used in health JSON and metrics attributes.
func (s Status) String() string {
	if s < 0 || int(s) >= len(statusNames) {
		return "unknown"
	}
	return statusNames[s]
}

// LoopState is the receive loop's own state.
type LoopState int32

const (
	// LoopStopped: not started, or closed.
	LoopStopped LoopState = iota
	// LoopRunning: claiming, or waiting between waves.
	LoopRunning
	// LoopBackingOff: waiting after a failed receive.
	LoopBackingOff
	// LoopFaulted: stopped fetching until the receiver is rebuilt.
	LoopFaulted
)

var loopNames = [...]string{"stopped", "running", "backing_off", "faulted"}

// String returns the loop state as used in health JSON.
func (s LoopState) String() string {
	if s < 0 || int(s) >= len(loopNames) {
		return "unknown"
	}
	return loopNames[s]
}

// ListenerState is a point-in-time snapshot of a listener, for health checks,
// metrics and tools. The zero value is a stopped listener.
type ListenerState struct {
	Name   string // the topic (and consumer group) the listener consumes
	Status Status
	Loop   LoopState

	// Destination is what the listener consumes in OpenTelemetry's
	// messaging terms: system, destination name, consumer group.
	Destination Destination

	// QueueCount = Buffered + InFlight + BatchPending.
	QueueCount   int
	Buffered     int // claimed, waiting for a permit
	InFlight     int // delivered to Watermill, not yet settled
	BatchPending int // held by batching stages, not yet settled

	Latched  bool // back-pressure is holding the loop (StatusTooBusy)
	Faulted  bool
	Fault    string    // the fault's cause, when Faulted
	FaultAt  time.Time // when the fault was recorded
	Rebuilds int64     // receivers rebuilt after a fault

	LastReceive         time.Time // last successful Claim (even an empty one)
	ConsecutiveFailures int       // Claim errors since the last success
	LastError           string    // the last Claim error
	QueueMissing        bool      // the last Claim failed with ErrQueueNotFound

	// LastContact is when the broker last answered the listener: a Claim
	// that reached it, a ping, or (a ContactReporter source) any call of
	// the source. Zero: never.
	LastContact time.Time
	// ContactFailing: a call made since LastContact failed, or a Claim has
	// been outstanding past its expected end (its long-poll wait plus a
	// second): the broker is not answering now. health reports a listener
	// broker_unreachable when this holds and LastContact is older than
	// health.Config.Unreachable.
	ContactFailing bool
	Wave           int // the size of the last wave launched
	StartedAt      time.Time
}

// A StateSource reports the state of its listeners. Every Berth subscriber
// is one (see [StatefulSubscriber]); health.Handler and
// telemetry.RegisterSubscriber read it.
type StateSource interface {
	// ListenerStates returns a snapshot of every running listener: one
	// per Subscribe call whose context is not done. It is cheap and safe
	// for concurrent use.
	ListenerStates() []ListenerState
}
