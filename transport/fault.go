package transport

import "time"

// Fault records a terminal failure of a pipeline stage: the receive loop,
// the receiver stage, or a plug-in the pipeline called (a logger). The
// listener reports it in [ListenerState] and to [Observer.Faulted], and its
// watchdog rebuilds the stage.
type Fault struct {
	Stage string    // the stage that failed: receive, map, begin, ack, …
	Cause error     // the error or recovered panic
	At    time.Time // when it was recorded
}

// Error describes the fault.
func (f *Fault) Error() string {
	return "berth: " + f.Stage + " faulted: " + f.Cause.Error()
}

// Unwrap returns the cause.
func (f *Fault) Unwrap() error { return f.Cause }
