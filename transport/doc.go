// Package transport holds the contracts every Berth transport implements and
// the machinery they share: the listener (one receive loop per Subscribe),
// the generic Watermill subscriber, and the URL registry.
//
// # The seam
//
// A transport implements only a [Source]: claim up to n raw deliveries, map
// one to a Watermill message, gate it (the lease check before user code), and
// settle it (complete, retry later, release untouched, dead-letter with a
// reason). Optional interfaces add lease renewal ([Renewer]), wake-ups
// ([Waker]) and fixed-size claims ([ClaimSizer]).
//
// Everything else is shared. A [Listener] runs the receive loop: it sizes
// each wave with the wave controller (package wave; no peek, no backlog
// query), never claims more than its receiver's free buffer space, applies
// back-pressure on QueueCount (buffered + in flight + batch pending), backs
// off after receive errors with jitter, and doubles as the watchdog that
// rebuilds a faulted receiver. The [Receiver] stage (package receiver) owns
// the bounded buffer, the concurrency permits, mapping, delivery on the
// Subscribe channel, and ack/nack settlement.
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
// Query parameters map to config fields (see [PipelineConfig.ParseURL]). A
// URL names a destination and how to use it, so one URL serves both sides:
// each side accepts the other side's known parameters (checked, then
// ignored). An unknown or invalid parameter is an error that names it and
// lists the accepted ones. Options carry what a URL cannot: [WithLogger],
// and [WithObserver] for metrics and traces (telemetry.NewObserver). The
// subscriber is a [StatefulSubscriber], which reports its listeners'
// states: it goes as it is to health.Handler.AddSource and
// telemetry.RegisterSubscriber.
//
// # Dead-letter reasons
//
// A message nacked on its last attempt is dead-lettered with the reason
// "nacked on attempt N of M (MaxAttempts)". [DeadLetterReason], a Watermill
// router middleware, records the handler's error with [SetNackReason]
// before the router nacks, and the reason goes on with ": " and that error
// (at most [MaxNackReason] bytes), to the dead-letter destination and to
// [Observer.DeadLettered].
//
// # Batching accounting
//
// Messages held by batching stages still count toward their listener's
// QueueCount: [EnterBatch] moves a message from in flight to batch pending
// (freeing its concurrency permit) and returns a settle function that is
// effective once. [JoinBatch] does the same for a stage that drops members
// whose context ends, without a context.AfterFunc per member. Receivers
// build each message's context with [NewMessageContext] and learn through
// [BatchHooks] when a batch takes the message and when it lets it go.
//
// # Observing
//
// An [Observer] (PipelineConfig.Observer; package telemetry implements one)
// gets the pipeline's events: each receive wave and Claim call, each
// delivery with its outcome, each settlement call, dead letters, faults and
// rebuilds. Transports describe what each listener consumes with a
// [Destination] (messaging system, destination name, consumer group: see
// SubscriberConfig's System, ConsumerGroup and DestinationName), which an
// observer implementing [ListenerObserver] receives once per listener and
// [ListenerState] reports.
//
// # Errors
//
// Callers branch on the sentinels with errors.Is: [ErrClosed],
// [ErrLeaseLost], [ErrInvalidConfig], [ErrQueueNotFound],
// [ErrUnknownScheme], [ErrMessageTooLarge].
package transport
