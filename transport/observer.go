package transport

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Outcome is how a delivered message was settled.
type Outcome int

const (
	// OutcomeAcked: the handler acked; the message was completed.
	OutcomeAcked Outcome = iota
	// OutcomeNacked: the handler nacked; the message will be redelivered.
	OutcomeNacked
	// OutcomeDeadLettered: nacked on its last attempt, or unmappable.
	OutcomeDeadLettered
	// OutcomeAbandoned: not settled before the subscriber closed; handed
	// back for redelivery.
	OutcomeAbandoned
)

var outcomeNames = [...]string{"acked", "nacked", "dead_lettered", "abandoned"}

// String returns the outcome as used in metric attributes.
func (o Outcome) String() string {
	if o < 0 || int(o) >= len(outcomeNames) {
		return "unknown"
	}
	return outcomeNames[o]
}

// SettleOp is a settlement call the pipeline makes to a source, as
// observers see it.
type SettleOp int

const (
	// SettleAck: Source.Complete, after an ack.
	SettleAck SettleOp = iota
	// SettleNack: Source.Retry, after a nack, or to hand back a message
	// not settled before the subscriber closed.
	SettleNack
	// SettleDeadLetter: Source.DeadLetter.
	SettleDeadLetter
	// SettleRelease: Source.Release, of deliveries that never reached
	// user code.
	SettleRelease
)

var settleOpNames = [...]string{"ack", "nack", "dead_letter", "release"}

// String returns the operation as used in metric and span attributes
// (messaging.operation.name): ack, nack, dead_letter, release.
func (op SettleOp) String() string {
	if op < 0 || int(op) >= len(settleOpNames) {
		return "unknown"
	}
	return settleOpNames[op]
}

// Destination says what a listener consumes, in the terms of the
// OpenTelemetry messaging conventions. The transport fills it in; the
// listener hands it to a [ListenerObserver] and reports it in
// [ListenerState].
type Destination struct {
	// System is the transport's messaging.system: "aws_sqs" for SQS,
	// "berth.postgres", "berth.sqlserver", "berth.sqlite" for the SQL queue
	// tables, "berth.mem" for mem://. Empty when the transport does not
	// say.
	System string
	// Name is the destination consumed (messaging.destination.name): the
	// topic on SQL and mem://, the queue's name on SQS.
	Name string
	// ConsumerGroup is the consumer group (messaging.consumer.group.name),
	// or empty for none.
	ConsumerGroup string
}

// An Observer receives the pipeline's events, for metrics and tracing
// (package telemetry implements one over OpenTelemetry). Methods are called on
// hot paths: they must be fast and safe for concurrent use. A panicking
// observer is recovered and ignored; it never faults the pipeline.
//
// Every method gets the listener's name. An observer that implements
// [ListenerObserver] gets the listener's [Destination] once instead, and
// the listener calls the observer it returns.
type Observer interface {
	// WaveDone is called after each receive wave: probes launched, probes
	// that found a message, deliveries claimed, and the wave's error.
	WaveDone(listener string, launched, found, claimed int, err error)

	// Received is called after each Source.Claim (a wave makes one, or one
	// per probe on sources with a [ClaimSizer]) with the time the call
	// started, the deliveries it returned and its error.
	Received(listener string, start time.Time, claimed int, err error)

	// Settled is called after each settlement call to the source, with the
	// time it started and its error. msg is the settled message (its
	// Context() is the one Delivering returned), or nil for a release or
	// for a delivery that could not be mapped; n is the number of
	// deliveries the call settled. Settled comes before the finish
	// function Delivering returned.
	Settled(listener string, op SettleOp, msg *message.Message, n int, start time.Time, err error)

	// Delivering is called when a message (already mapped and gated) is
	// about to be handed to Watermill. It may return a derived context for
	// the message (a consumer span); finish is called once with the outcome
	// when the message is settled (or dropped), and may be nil.
	Delivering(ctx context.Context, listener string, msg *message.Message) (_ context.Context, finish func(Outcome))

	// DeadLettered is called for every message moved to the dead-letter
	// destination (including unmappable deliveries, for which msg is nil).
	DeadLettered(listener string, msg *message.Message, reason string)

	// Faulted is called after a receiver recorded a terminal fault; Rebuilt
	// after the listener replaced it.
	Faulted(listener string, f *Fault)
	Rebuilt(listener string)
}

// A ListenerObserver is an Observer that binds itself to each listener.
// A listener whose receiver.Config.Observer implements it calls ForListener
// once, when it is built, and sends every event of its own and of its
// receivers to the returned Observer; the observer can then prepare what
// it records per listener once, and name the destination as the transport
// does rather than by the listener's name. A nil result, or a panic, keeps
// the observer itself.
type ListenerObserver interface {
	Observer
	ForListener(name string, d Destination) Observer
}

// NopObserver ignores every event. Embed it to implement only some methods.
type NopObserver struct{}

// WaveDone implements Observer.
func (NopObserver) WaveDone(string, int, int, int, error) {}

// Received implements Observer.
func (NopObserver) Received(string, time.Time, int, error) {}

// Settled implements Observer.
func (NopObserver) Settled(string, SettleOp, *message.Message, int, time.Time, error) {}

// Delivering implements Observer; it returns ctx unchanged.
func (NopObserver) Delivering(ctx context.Context, _ string, _ *message.Message) (context.Context, func(Outcome)) {
	return ctx, nil
}

// DeadLettered implements Observer.
func (NopObserver) DeadLettered(string, *message.Message, string) {}

// Faulted implements Observer.
func (NopObserver) Faulted(string, *Fault) {}

// Rebuilt implements Observer.
func (NopObserver) Rebuilt(string) {}

// MetadataPublishedAt is set by Berth publishers to the publish time (RFC
// 3339 with nanoseconds, UTC), for end-to-end latency.
const MetadataPublishedAt = "berth_published_at"

// PublishedAt returns the publish time recorded in msg's metadata.
func PublishedAt(msg *message.Message) (time.Time, bool) {
	v := msg.Metadata.Get(MetadataPublishedAt)
	if v == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}
