// Package transport holds the contracts every Berth transport implements and
// every pipeline part speaks: the [Source] seam and its optional interfaces,
// [Delivery], the sentinel errors, the [Observer], listener status and state
// ([ListenerState], [StateSource]), [Fault], [Clock], and the URL registry.
// It starts no goroutines: the receive pipeline that drives a source lives in
// package receiver.
//
// # The seam
//
// A transport implements only a [Source]: claim up to n raw deliveries, map
// one to a Watermill message, gate it (the lease check before user code), and
// settle it (complete, retry later, release untouched, dead-letter with a
// reason). Optional interfaces add lease renewal ([Renewer]), wake-ups
// ([Waker]), fixed-size claims ([ClaimSizer]) and per-key dispatch for
// claims that may hold several deliveries of one key ([Sequencer]).
//
// Everything else is shared, in package receiver: a receiver.Listener runs
// the receive loop (waves sized by package wave, no peek, no backlog query),
// never claims more than its stage's free buffer space, applies
// back-pressure on QueueCount (buffered + in flight + batch pending), backs
// off after receive errors with jitter, and rebuilds a faulted stage; the
// stage owns the bounded buffer, the concurrency permits, mapping, delivery
// on the Subscribe channel, and ack/nack settlement. A transport's subscriber
// is one receiver.NewSubscriber call over a source factory.
//
// # Opening by URL
//
// Transport packages register a URL scheme when imported, as database/sql
// drivers do; [OpenPublisher] and [OpenSubscriber] pick the transport from
// the URL, so one program runs on mem:// in tests, sqlite:// locally and
// sqlserver:// or sqs:// in production:
//
//	import _ "github.com/berth-go/berth/transport/all"
//
//	sub, err := transport.OpenSubscriber(ctx, os.Getenv("BERTH_URL"))
//
// Query parameters map to config fields (docs/configuration.md lists them). A
// URL names a destination and how to use it, so one URL serves both sides:
// each side accepts the other side's known parameters (checked, then
// ignored). An unknown or invalid parameter is an error that names it and
// lists the accepted ones. Options carry what a URL cannot: [WithLogger],
// [WithObserver] for metrics and traces (telemetry.NewObserver), and
// [WithConsumerGroup], the subscriber's consumer group without string
// surgery on the URL (every driver honours it; a URL naming another group
// is an error). The
// subscriber is a [StatefulSubscriber], which reports its listeners'
// states: it goes as it is to health.Handler.AddSource and
// telemetry.RegisterSubscriber.
//
// # Dead-letter reasons and batching accounting
//
// Package receiver records why a handler nacked (receiver.SetNackReason,
// receiver.DeadLetterReason) and counts the messages batching stages hold
// (receiver.EnterBatch, receiver.JoinBatch).
//
// # Observing
//
// An [Observer] (receiver.Config.Observer; package telemetry implements one)
// gets the pipeline's events: each receive wave and Claim call, each
// delivery with its outcome, each settlement call, dead letters, faults and
// rebuilds. Transports describe what each listener consumes with a
// [Destination] (messaging system, destination name, consumer group: see
// receiver.SubscriberConfig's System, ConsumerGroup and DestinationName), which an
// observer implementing [ListenerObserver] receives once per listener and
// [ListenerState] reports.
//
// # Errors
//
// Callers branch on the sentinels with errors.Is: [ErrClosed],
// [ErrLeaseLost], [ErrInvalidConfig], [ErrQueueNotFound],
// [ErrUnknownScheme], [ErrMessageTooLarge].
package transport
