// Package sqs is Berth's Amazon SQS transport: a Watermill publisher and a
// subscriber whose receive side is a [transport.Source] driven by the shared
// pipeline, built to spend as few billed API requests per message as SQS
// allows.
//
// Import the AWS SDK's package as awssqs next to this one.
//
// # Configuration
//
// [NewPublisher] and [NewSubscriber] take a config struct whose zero value
// is the defaults. [ClientConfig] takes the caller's own SQS and SNS
// clients (any implementation of [API] and [SNSAPI], used as they are), or
// builds them from an AWS configuration: the AWS default configuration
// (environment, shared files, SSO, roles) unless given one; Region,
// Endpoint (for emulators) and Credentials override it. The configuration's
// own Retryer is kept; without one, each API request is attempted at most 3
// times (backoff capped at 2s), and RequestAttempts caps the attempts
// either way: a failing ReceiveMessage comes back to the pipeline, which
// backs off with jitter and never ends the loop.
//
// # Queues and topic names
//
// A Watermill topic maps to the queue [SanitizeName](topic, FIFO): characters
// other than A-Z a-z 0-9 _ - become '_', FIFO names end in ".fifo", and a
// topic that had to change or is too long for SQS's 80 characters is cut
// and ends with '-' and 8 hex digits of its SHA-256, so distinct topics never
// share a queue. QueueConfig.QueueName replaces the mapping. Queue URLs are
// resolved once (GetQueueUrl, GetQueueAttributes) and cached. With
// QueueConfig.Create, missing queues are created with the configured
// attributes (FIFO, MaximumMessageSize, a redrive policy to DeadLetterQueue
// with MaxReceiveCount, VisibilityTimeout for subscribers); without it a
// missing queue is an error wrapping [transport.ErrQueueNotFound].
//
// # Publishing
//
// Publish sends SendMessageBatch requests of up to 10 messages and
// MaxBatchBytes, up to PublishConcurrency at once (one at a time for FIFO,
// to keep order): n messages in one call cost ceil(n/10) requests. Entries
// that fail on the server side are sent again, up to SendAttempts; the error
// names every message not sent. A message over the queue's
// MaximumMessageSize (body plus attributes, as SQS counts) is rejected with
// [transport.ErrMessageTooLarge] naming the limit. Message contexts are
// honoured: a message whose context is done is not sent.
//
// A Publish of one message sends one SendMessage. With
// PublisherConfig.PublishLinger (URL publish_linger) the single messages of
// concurrent Publish calls to one queue (or SNS topic) share batch
// requests instead: a batch goes when it holds 10 messages or
// MaxBatchBytes, when it holds as many messages as the most calls lately
// in progress at once (so a lone caller never waits, and a pool of n
// producers sends batches of n), or PublishLinger after its first message,
// with up to PublishConcurrency batches in flight per queue. Each call
// returns once its own message is sent or failed, with its own entry's
// error; on FIFO queues each group's messages keep the order of the calls
// that returned. Close sends what waits and waits for it.
//
// Messages are encoded by the configured [Codec] (PublisherConfig.Codec,
// SubscriberConfig.Codec, URL parameter codec), by default [BerthCodec]:
// metadata becomes String message attributes, never more than SQS's 10: the
// UUID takes one ([AttributeUUID]); keys that are valid attribute names with
// non-empty values follow in key order while they fit; the rest is packed
// as JSON into [AttributeMetadata]. A payload that is not text SQS accepts
// is sent base64-encoded, flagged by [AttributeBodyEncoding]. Metadata keys
// [MetadataGroupID], [MetadataDeduplicationID] (FIFO; defaults: the topic
// and the message UUID) and [MetadataDelay] (standard queues, up to 15m) set
// the SQS fields of the same meaning and are not sent as attributes.
//
// # Delays
//
// A message's delay comes from [MetadataDelay] or, when it is not set, from
// Watermill's components/delay metadata (delay.Message, delay.NewPublisher
// with delay.WithContext), read as on every transport (sub-second for
// delay.For). It becomes the message's DelaySeconds, rounded up to whole
// seconds so that it is never delivered early (delay.For(1500ms) arrives
// after 2s). SQS cannot honour every delay, and Publish refuses, with
// [ErrDelayUnsupported] naming the message UUID and the limit, a delay over
// 15 minutes, any delay on a FIFO queue (SQS rejects per-message
// DelaySeconds there) and any delay through SNS (which has none): such a
// message is not sent, never delivered at once. A delay already past is
// none. A malformed value fails with [transport.ErrInvalidMessage] naming
// the key.
//
// # Wire format and watermill-aws
//
// [WatermillAWSCodec] (codec=watermill-aws) reads and writes the format of
// github.com/ThreeDotsLabs/watermill-aws v1.0.x, both its sqs and its sns
// packages: the UUID in [WatermillAWSUUIDAttribute], each metadata key in a
// String attribute of its own, the payload as the body. Berth and
// watermill-aws services can then share queues and SNS topics while a fleet
// moves one service at a time. The format has one attribute per key, so a
// message with more than 9 metadata keys, a binary or empty payload, or a
// key SQS does not accept as an attribute name is refused with
// [transport.ErrInvalidMessage] before anything is sent (watermill-aws sends
// it and SQS rejects it). Its Unmarshal also reads Berth's format, so a
// queue may hold both while publishers change codec. The [Codec] interface
// has the method set of watermill-aws's Marshaler and Unmarshaler, so a
// custom watermill-aws marshaler plugs in as it is.
//
// # Receiving
//
// Claim is one ReceiveMessage long poll (WaitTime, 5s by default) for at
// most min(10, free buffer) messages, asking for every system and message
// attribute and for VisibilityTimeout. The pipeline's wave controller
// decides how many polls run at once: one while idle, more while each comes
// back with messages. Map decodes the body and attributes; the UUID falls
// back to the SQS message id for messages other tools sent; metadata gets
// [MetadataSQSMessageID], [MetadataReceiveCount] and [MetadataSentTimestamp].
// Undecodable attributes are a Map error wrapping [ErrUndecodable]: the
// pipeline dead-letters the message. The raw body is held only by
// Delivery.Raw, which the pipeline drops after Map.
//
// # Closing
//
// A long poll is never cut short: cancelled client-side, it would go on
// waiting at SQS and take the next messages into their visibility timeout.
// Closing a subscriber stops new polls; a Claim cancelled during its poll
// returns at once, the poll runs to its end (WaitTime at most) and whatever
// it received is made visible again (visibility 0), as are the messages
// buffered but not yet handed to a handler. Source.Close waits for the
// polls still out even past its context, so an idle subscriber closes in at
// most WaitTime, a busy one in at most the pipeline's DrainTimeout or
// WaitTime, whichever is longer, and no message sent around Close waits
// for a visibility timeout. WaitTime is the trade-off between the requests
// an idle subscriber costs (60/WaitTime a minute) and how long its Close
// can take; see docs/transports/sqs.md, "Closing".
//
// # Settlement
//
// Acks are DeleteMessageBatch requests and nacks ChangeMessageVisibilityBatch
// requests, coalesced across concurrent handlers: a request goes when 10
// entries (or Concurrency, if smaller) wait, or SettleInterval (20ms) after
// the first. Entry ids are positions; entries that fail on the server side
// are retried (SettleAttempts); an invalid receipt handle is reported as
// [transport.ErrLeaseLost]. A nack's delay becomes the visibility timeout,
// rounded up to whole seconds (at most 12h). Release (buffered messages of a
// closing subscriber) sets visibility 0, so other consumers get them at
// once. Close flushes what is waiting.
//
// Begin costs no request: the receipt handle is the lease. Only a message
// that sat in the buffer so long that its visibility could end before the
// next heartbeat is extended first; one whose visibility already ended is
// dropped with [transport.ErrLeaseLost] (SQS would redeliver it anyway).
// The heartbeat (Renew, every 70% of VisibilityTimeout) extends, with
// ChangeMessageVisibilityBatch, the messages handlers hold whose visibility
// would otherwise end before the next beat, and reports lost ones.
//
// DeadLetter sends the message to QueueConfig.DeadLetterQueue with
// [AttributeDeadLetter] (reason, source queue, SQS message id, receive
// count), then deletes it. Without a dead-letter queue the message is made
// visible again and left to the queue's redrive policy: it is received
// again until maxReceiveCount moves it, or, without a redrive policy, until
// its retention period ends.
//
// # Consumer groups through SNS
//
// With PublisherConfig.SNS the publisher sends PublishBatch requests (10 a
// request, 256 KiB) to the SNS topic named like the queue. A subscriber with
// a ConsumerGroup consumes queue "<topic>-<group>" subscribed to that SNS
// topic with raw message delivery, so each group gets every message and
// Watermill's consumer-group semantics hold. Subscriptions are made on
// Subscribe or SubscribeInitialize; with Create, topics and queues are
// created and the queue policy lets the topic send to the queue.
//
// A group receives what is published after its queue is subscribed (SNS
// semantics): what was published before is not delivered to it. To
// receive from the first publish, declare the groups on the publisher:
// PublisherConfig.Groups (URL groups=orders:billing,*:audit, "*" for every
// topic) makes the publisher, before its first publish to a topic, resolve
// (with Create, create) each declared group's queue and subscribe it
// exactly as a Subscriber of that group would. The berth CLI's migrate
// command works on SQL transports only.
//
// SNS accepts a publish to a topic without any subscription and drops it.
// The publisher asks ListSubscriptionsByTopic once per topic and
// SubscriptionsTTL (10s; a subscription made in this process is seen at
// once): messages published while a topic has none are counted in
// [PublisherStats].NoSubscribers (Publisher.Stats) and one error-level log
// line is written per topic; with RequireSubscribers (URL
// require_subscribers=true) Publish sends nothing and returns
// [ErrNoSubscribers] instead.
//
// # URLs
//
// The scheme "sqs" is registered for [transport.OpenPublisher] and
// [transport.OpenSubscriber]:
//
//	sqs://                                   AWS, default configuration
//	sqs://?region=eu-west-1&create=true
//	sqs://test:test@127.0.0.1:4566?region=us-east-1   an emulator
//	sqs://?endpoint=https://sqs.example.internal
//
// A host selects the endpoint http://host:port (https with secure=true);
// user:password are static credentials. Parameters, both sides: region,
// endpoint, secure, request_attempts, create, fifo, content_dedup,
// max_message_size, dead_letter_queue, max_receive_count, sns, codec
// (berth, watermill-aws). Publisher:
// publish_concurrency, publish_linger, groups, require_subscribers,
// subscriptions_ttl. Subscriber: consumer_group, wait_time,
// visibility_timeout, settle_interval and the pipeline's (concurrency,
// buffer, max_attempts, retry_delay, …). One URL serves both sides: each
// side accepts the other side's parameters (checked, then ignored), so a
// publisher may be opened from a URL carrying max_attempts. A parameter
// neither side knows is rejected, naming it and the accepted ones.
//
// # Counting requests
//
// [RequestCounter] counts API requests by operation (each attempt, as AWS
// bills them) through ClientConfig.APIOptions, for benchmarks and metrics.
package sqs
