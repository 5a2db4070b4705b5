package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// schemaURL is the semantic conventions version the names follow.
const schemaURL = semconv.SchemaURL

// Metric names. Where the OpenTelemetry messaging semantic conventions
// define a metric it is used as defined; the others are Berth's own, under
// berth.*. docs/observability.md describes each.
const (
	// Consumer side (Observer).
	MetricConsumedMessages = "messaging.client.consumed.messages" // {message}: deliveries claimed from the broker
	MetricProcessDuration  = "messaging.process.duration"         // s: handler time, delivery to ack or nack
	MetricSettledMessages  = "berth.messages.settled"             // {message}: by berth.outcome
	MetricDeadLettered     = "berth.messages.dead_lettered"       // {message}: by berth.dead_letter.cause
	MetricEndToEnd         = "berth.message.end_to_end.duration"  // s: publish to ack
	MetricReceiveWaves     = "berth.receive.waves"                // {wave}: by berth.result
	MetricReceiveProbes    = "berth.receive.probes"               // {probe}: receive calls, by berth.result
	MetricWaveSize         = "berth.receive.wave.size"            // {probe}: probes per wave
	MetricFaults           = "berth.listener.faults"              // {fault}: by berth.fault.stage
	MetricRebuilds         = "berth.listener.rebuilds"            // {rebuild}

	// Per-listener up-down counters (RegisterSubscriber).
	MetricQueueCount   = "berth.listener.queue_count"   // {message}
	MetricBuffered     = "berth.listener.buffered"      // {message}
	MetricInFlight     = "berth.listener.in_flight"     // {message}
	MetricBatchPending = "berth.listener.batch_pending" // {message}
	MetricLatched      = "berth.listener.latched"       // {listener}: 1 when back-pressure holds the loop
	MetricFaulted      = "berth.listener.faulted"       // {listener}: 1 while the receiver is faulted
	MetricStatus       = "berth.listener.status"        // {listener}: 1 for the current berth.listener.status

	// Round trips (RegisterRoundTripper).
	MetricRoundTrips = "berth.client.round_trips" // {request}: by berth.operation

	// Producer side (Publisher); the operation duration also on the
	// consumer side (Observer), for receive and settle calls.
	MetricSentMessages      = "messaging.client.sent.messages"      // {message}
	MetricOperationDuration = "messaging.client.operation.duration" // s: one Publish, receive or settlement call
	MetricParked            = "berth.publish.parked"                // {message}: parked for consumer groups registered later (Parker)
)

// operationDurationDesc is the semantic conventions' description of
// MetricOperationDuration.
const operationDurationDesc = "Duration of messaging operation initiated by a producer or consumer client."

// Values of messaging.operation.name (the settlement operations are
// transport.SettleOp's: ack, nack, dead_letter, release).
const (
	opCreate  = "create"
	opSend    = "send"
	opReceive = "receive"
	opProcess = "process"
)

// Attribute keys of Berth's own (the messaging.* ones come from semconv).
const (
	// AttrOutcome is how a message was settled: acked, nacked,
	// dead_lettered, abandoned (transport.Outcome.String).
	AttrOutcome = attribute.Key("berth.outcome")
	// AttrDeadLetterCause is attempts_exhausted (nacked on its last
	// attempt) or unmappable (the transport could not map the delivery).
	AttrDeadLetterCause = attribute.Key("berth.dead_letter.cause")
	// AttrResult is a wave's result (messages, empty, error) or a probe's
	// (found, empty).
	AttrResult = attribute.Key("berth.result")
	// AttrFaultStage is the pipeline stage that faulted (transport.Fault.Stage).
	AttrFaultStage = attribute.Key("berth.fault.stage")
	// AttrSubscriber names the subscriber given to RegisterSubscriber.
	AttrSubscriber = attribute.Key("berth.subscriber")
	// AttrStatus is a listener status (transport.Status.String).
	AttrStatus = attribute.Key("berth.listener.status")
	// AttrClient names the client given to RegisterRoundTripper.
	AttrClient = attribute.Key("berth.client")
	// AttrOperation is a round trip's operation: an SQS API name
	// (ReceiveMessage, DeleteMessageBatch, …) or a SQL statement kind.
	AttrOperation = attribute.Key("berth.operation")
	// AttrAttempt is the delivery attempt (span attribute only).
	AttrAttempt = attribute.Key("berth.attempt")
	// AttrDeliveryID is the broker's id of the delivery, the SQS message id
	// or the SQL row id (span attribute only).
	AttrDeliveryID = attribute.Key("berth.delivery.id")
)

// Semantic-convention attributes used here.
var (
	keySystem         = semconv.MessagingSystemKey
	keyDestination    = semconv.MessagingDestinationNameKey
	keyConsumerGroup  = semconv.MessagingConsumerGroupNameKey
	keyOperationName  = semconv.MessagingOperationNameKey
	keyMessageID      = semconv.MessagingMessageIDKey
	keyConversationID = semconv.MessagingMessageConversationIDKey
	keyBatchCount     = semconv.MessagingBatchMessageCountKey
	keyBodySize       = semconv.MessagingMessageBodySizeKey
	keyErrorType      = semconv.ErrorTypeKey
)

// Histogram bucket boundaries, in seconds.
var (
	durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	endToEndBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	waveSizeBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}
)
