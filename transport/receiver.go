package transport

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// A Receiver is the stage between a listener's receive loop and Watermill:
// the bounded buffer, the concurrency permits, the lease gate, delivery on
// the Subscribe channel and settlement. Package receiver implements it; the
// interface lives here, with the Listener that consumes it.
//
// A Receiver is used by one listener and never restarted: once it has
// faulted or been closed, the listener builds a new one.
type Receiver interface {
	// Push hands claimed deliveries to the stage. It never blocks; the loop
	// claims no more than Free reported.
	Push(ds []*Delivery)
	// Free is the number of deliveries the buffer can still take.
	Free() int
	// Buffered is the number of deliveries waiting for a permit.
	Buffered() int
	// InFlight is the number of deliveries being gated, delivered or
	// settled (each holds a permit).
	InFlight() int
	// Dispatched counts the deliveries taken from the buffer so far; the
	// watchdog uses it to spot a stage that accepts deliveries but no
	// longer dispatches them.
	Dispatched() int64
	// Fault returns the terminal fault, or nil while the receiver is healthy.
	Fault() *Fault
	// Done is closed when Close has finished.
	Done() <-chan struct{}
	// ReleaseBuffered hands every buffered (never delivered) delivery back
	// to the broker at once, with no attempt counted. Listeners call it when
	// paused.
	ReleaseBuffered(ctx context.Context) error
	// Close stops the stage: buffered deliveries are released to the
	// broker, in-flight ones may finish until ctx is done, and what is left
	// is handed back for redelivery. It is idempotent and waits.
	Close(ctx context.Context) error
}

// ReceiverParams is what a listener gives a ReceiverFactory.
type ReceiverParams struct {
	// Source is the transport's source. The receiver does not close it.
	Source Source
	// Config is the pipeline configuration, with defaults applied.
	Config PipelineConfig
	// Out is the Watermill channel. The receiver sends on it; the listener
	// owns and closes it.
	Out chan<- *message.Message
	// Context carries the values of the Subscribe context into every
	// message's context (without its cancellation).
	Context context.Context
	// Pending is the listener's batching-pending counter; the receiver
	// attaches a Tracker bound to it to every delivered message.
	Pending *Pending
	// OnChange is called (without blocking) whenever the receiver's counts
	// change, so back-pressure reacts at once.
	OnChange func()
	// Logger never nil.
	Logger watermill.LoggerAdapter
	// Name is the listener's name, for observer events.
	Name string
}

// ReceiverFactory builds a new receiver; listeners call it on Start and on
// every rebuild.
type ReceiverFactory func(p ReceiverParams) (Receiver, error)

// Fault records a terminal failure of a pipeline stage.
type Fault struct {
	Stage string    // the stage or injection point that failed
	Cause error     // the error or recovered panic
	At    time.Time // when it was recorded
}

// Error describes the fault.
func (f *Fault) Error() string {
	return "berth: " + f.Stage + " faulted: " + f.Cause.Error()
}

// Unwrap returns the cause.
func (f *Fault) Unwrap() error { return f.Cause }
