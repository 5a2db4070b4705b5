// Package inspect is what the berth command's operations tools (migrate,
// queues, dlq) need beyond the transports' public API: opening a deployment
// from its transport URL, creating or upgrading its schema, counting rows
// and messages by state, and listing, replaying and purging dead letters.
//
// # SQL
//
// OpenSQL accepts the same postgres://, sqlite:// and sqlserver:// URLs as
// the transports (schema, table_prefix and the other Berth parameters
// included, so a service's URL can be pasted as is) and works with the
// engine's tables through the dialect (package sqlqueue): Migrate applies
// the dialect's migrations under the cluster-wide schema lock, exactly as
// a starting subscriber does; Queues counts each queue table's rows by
// state; replaying a dead letter inserts it into its queue with the
// dialect's Insert statement (attempts start again at zero; PostgreSQL
// subscribers are woken by NOTIFY) and deletes it from the error table, in
// one transaction.
//
// Open, for the read-only and dead-letter commands, creates nothing: a
// SQLite file or a schema (URL parameter schema) that does not exist is
// ErrNoDatabase, where OpenSQL (for Migrate) would create the file. A
// Filter naming a queue that does not exist makes DeadLetters, Replay and
// Purge fail with an error wrapping transport.ErrQueueNotFound.
//
// Groups lists the consumer groups (the subscriptions publishers fan out
// to) with their counts and last reader, from the fleet's listeners table
// or, without it, from the queue's leases and dead letters; RetireGroup
// unregisters a group, waits for the publishers' cached subscriptions to
// expire, and drops its queue table (see docs/consumer-groups.md).
//
// ImportWatermillSQL copies a watermill-sql topic's unconsumed messages
// (PostgreSQL, default or queue schema) into the Berth queue of each
// consumer group, with the dialect's Insert statement, recording its
// position in <prefix>migrated_watermill in the same transaction.
//
// # SQS
//
// OpenSQS accepts sqs:// URLs. Queues reads each queue's approximate counts
// (GetQueueAttributes) and its dead-letter queue's; the dead-letter
// commands work on the queue named by the URL's dead_letter_queue
// parameter: replay sends each message back to the queue named in its
// berth_dead_letter attribute (a new message, so its receive count starts
// again) and deletes it from the dead-letter queue.
//
// # Filters
//
// A Filter selects dead letters by queue (table name or topic for SQL,
// source queue name for SQS), by a substring of the reason, and by age
// (time since the message was dead-lettered).
package inspect
