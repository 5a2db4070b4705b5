package health

import (
	"context"
	"errors"

	"github.com/berth-go/berth/transport"
)

// A Source is what health reads: a set of listeners. What
// transport.OpenSubscriber returns (a transport.StatefulSubscriber),
// *receiver.Subscriber, every transport's subscriber (which is or embeds
// one) and a batching.Subscriber over any of them implement it.
//
// ListenerStates is called once per probe and must be cheap and safe for
// concurrent use. A listener that no longer exists (its Subscribe ended)
// should no longer be listed.
type Source = transport.StateSource

// SourceFunc adapts a function to Source.
type SourceFunc func() []transport.ListenerState

// ListenerStates calls f.
func (f SourceFunc) ListenerStates() []transport.ListenerState { return f() }

// A Pinger checks connectivity to a broker: a SQL database
// (PingFunc(db.PingContext)) or an SQS queue (a GetQueueAttributes call).
// Ping must return when ctx is done; the handler waits for it.
type Pinger interface {
	Ping(ctx context.Context) error
}

// PingFunc adapts a function to Pinger.
type PingFunc func(ctx context.Context) error

// Ping calls f.
func (f PingFunc) Ping(ctx context.Context) error { return f(ctx) }

// Errors returned by the checks of github.com/alexliesenfeld/health built
// by Check, Handler.ReadyCheck and Handler.LiveCheck. The wrapped errors name
// each listener or pinger at fault.
var (
	// ErrNotReady: at least one listener is not ready, or a ping failed.
	ErrNotReady = errors.New("berth: not ready")
	// ErrNotLive: at least one listener failed liveness (a fault that was
	// not rebuilt within Config.FaultGrace).
	ErrNotLive = errors.New("berth: not live")
)

// Status is a health verdict. Its zero value is Healthy; a worse verdict
// compares greater, so the verdict of many parts is their maximum.
type Status int

const (
	// Healthy: working as intended.
	Healthy Status = iota
	// Degraded: alive and possibly ready, but not at full service (too
	// busy, paused, starting, receive errors). HTTP 200 on /healthz.
	Degraded
	// Unhealthy: not doing its job (faulted, queue missing, stopped, not
	// receiving, ping failed). HTTP 503 on /healthz.
	Unhealthy
)

var statusNames = [...]string{"healthy", "degraded", "unhealthy"}

// String returns "healthy", "degraded" or "unhealthy".
func (s Status) String() string {
	if s < 0 || int(s) >= len(statusNames) {
		return "unknown"
	}
	return statusNames[s]
}

// MarshalText encodes s as its String.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a String form.
func (s *Status) UnmarshalText(b []byte) error {
	for i, n := range statusNames {
		if n == string(b) {
			*s = Status(i)
			return nil
		}
	}
	return errors.New("health: unknown status " + string(b))
}

// Reason says why a listener or a ping got its verdict. Reasons are stable
// strings: alert on them.
type Reason string

// Reasons of listener and ping verdicts. See the package documentation for
// the full mapping.
const (
	ReasonOK               Reason = "ok"                 // accepting and receiving
	ReasonStarting         Reason = "starting"           // within the startup grace, not yet receiving
	ReasonTooBusy          Reason = "too_busy"           // back-pressure latched
	ReasonPaused           Reason = "paused"             // paused on purpose
	ReasonStopped          Reason = "stopped"            // not running
	ReasonFaulted          Reason = "faulted"            // receiver faulted, within the fault grace
	ReasonFaultNotRebuilt  Reason = "fault_not_rebuilt"  // faulted for longer than the fault grace
	ReasonQueueMissing     Reason = "queue_missing"      // the queue or table does not exist
	ReasonReceiveErrors    Reason = "receive_errors"     // some consecutive receive failures
	ReasonReceiveFailing   Reason = "receive_failing"    // consecutive receive failures ≥ the threshold
	ReasonNotReceiving     Reason = "not_receiving"      // accepting but never received, after the startup grace
	ReasonReceiveStalled   Reason = "receive_stalled"    // accepting but no receive for longer than StaleReceive
	ReasonUnreachable      Reason = "broker_unreachable" // the broker has not answered for Unreachable while calls fail
	ReasonUnknownStatus    Reason = "unknown_status"     // a listener status this version does not know
	ReasonStateUnavailable Reason = "state_unavailable"  // the source panicked reporting its state
	ReasonPingFailed       Reason = "ping_failed"        // a Pinger returned an error
)
