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

// An Observer receives the pipeline's events, for metrics and tracing
// (package telemetry implements one over OpenTelemetry). Methods are called on
// hot paths: they must be fast and safe for concurrent use. A panicking
// observer is recovered and ignored; it never faults the pipeline.
type Observer interface {
	// WaveDone is called after each receive wave: probes launched, probes
	// that found a message, deliveries claimed, and the wave's error.
	WaveDone(listener string, launched, found, claimed int, err error)

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

// NopObserver ignores every event. Embed it to implement only some methods.
type NopObserver struct{}

// WaveDone implements Observer.
func (NopObserver) WaveDone(string, int, int, int, error) {}

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
