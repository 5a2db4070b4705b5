// Package telemetry instruments Berth with OpenTelemetry, following the
// messaging semantic conventions (semconv v1.43.0): a consumer span per
// message continuing the producer's trace, with client spans for the
// receive and settlement calls around it, a publisher decorator that
// propagates the W3C trace context through message metadata, a batch span
// helper, and metrics through the OpenTelemetry metric API only. The SDK,
// exporters and sampling stay the application's choice; nothing here is on
// a transport's hot path unless configured, and the transports do not
// import this package.
//
// docs/observability.md lists every span, attribute and metric with its
// unit, and example dashboard queries.
//
// # Wiring
//
// One Config serves the consumer and the producer side. Its zero value uses
// the global providers (otel.GetTracerProvider, otel.GetMeterProvider) and
// the global propagator, read each time it is used, or W3C Trace Context
// while none is installed:
//
//	cfg := telemetry.Config{}                  // or TracerProvider/MeterProvider
//	obs, err := telemetry.NewObserver(cfg)
//	...
//	subCfg.Pipeline.Observer = obs             // any transport's SubscriberConfig
//	sub, err := sqs.NewSubscriber(subCfg, logger)
//	pub := telemetry.Publisher(rawPub, cfg)
//	reg, err := telemetry.RegisterSubscriber(meter, "orders", sub)
//
// # What the transport names
//
// messaging.system, messaging.destination.name and
// messaging.consumer.group.name come from the transport: each listener
// binds the Observer with its transport.Destination (the Observer is a
// transport.ListenerObserver), Publisher asks the publisher it wraps
// (SystemNamer), RegisterSubscriber reads each listener's state. SQS
// reports aws_sqs (aws.sns for a publisher with SNS) and the queue name;
// the SQL queue tables berth.postgres, berth.sqlserver or berth.sqlite, and
// mem:// berth.mem (the conventions define no value for them), with the
// topic and the consumer group apart. Config.System overrides the system;
// DefaultSystem stands in only where nothing names one.
//
// # Traces
//
// A Publisher over a SQL transport's publisher implements
// transport.TxPublisher: transport.PublishInTx reaches the transactional
// outbox through it, instrumented the same way.
//
// Publisher starts a producer "send <topic>" span per Publish call, a child
// of the first message's Context(), and injects the trace context into each
// message's metadata (traceparent, and tracestate when not empty: two keys,
// within SQS's limit of ten message attributes, which the SQS transport
// enforces by packing overflow into one attribute). A batch Publish also
// gets a "create <topic>" span per message, linked from the send span, then
// of kind client.
//
// On the consumer side, each receive call that claimed messages (or
// failed) is a client "receive <destination>" span, a trace of its own,
// with messaging.batch.message_count; empty receives are not traced. The
// Observer starts a consumer "process <destination>" span when the pipeline
// delivers a message: a child of the extracted producer context, or with
// Config.Link a new trace linked to it. The span is in the message's
// Context() for the handler; its settlement is a client "ack
// <destination>" (or nack, dead_letter) span, its child; it ends when the
// message is acked (status unset), nacked or dead-lettered (status error),
// or abandoned at shutdown. StartBatchSpan starts one span for a batch
// handler, linked to every member's context.
//
// # Metrics
//
// The Observer counts claimed, settled (by outcome) and dead-lettered
// messages, receive waves and probes (empty receives included), faults and
// rebuilds, and records wave sizes, handler durations, end-to-end latency
// (publish time to ack, from transport.MetadataPublishedAt, which Publisher
// sets) and the duration of every receive and settlement call
// (messaging.client.operation.duration, operation type receive or settle,
// as the producer's Publish calls are send). RegisterSubscriber adds
// per-listener observable up-down counters read from ListenerStates (queue
// count, buffered, in flight, batch pending, latched, faulted, status: they
// add up across listeners); RegisterRoundTripper reports broker round trips
// by operation. Attributes are bounded: system, destination, consumer group,
// operation, outcome, result, fault stage, error type. Message ids appear
// on spans, never on metrics.
//
// # Logging
//
// Logging is not this package's concern: every transport takes a Watermill
// watermill.LoggerAdapter (nil discards), and watermill.NewSlogLogger adapts
// a *slog.Logger.
package telemetry
