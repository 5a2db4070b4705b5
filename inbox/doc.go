// Package inbox gives exactly-once effects to a handler of any transport
// whose effects live in a SQL database (PostgreSQL, SQLite or SQL Server):
// an SQS consumer writing to PostgreSQL, a mem:// pipeline in tests, a SQL
// queue in another database than the handler's tables.
//
// Inbox.Middleware, a Watermill router middleware, begins a transaction on
// the user's database, records the message's key in the inbox table inside
// it, and runs the handler, which finds the same transaction with
// transport.TxFromContext (the call a handler of a SQL transport makes, so
// one handler serves both). When the handler returns nil the transaction
// commits, the key with the effects, and the message is acked; when it
// fails, all of it rolls back and the message is nacked. A message whose key
// is already recorded was handled before (a redelivery after a lost ack, a
// duplicate publish): it is acked without running the handler. A concurrent
// duplicate waits on the key's row until the first transaction ends, then
// is skipped, or handled if the first one rolled back.
//
// Unlike Watermill's middleware.Deduplicator, which marks a key outside the
// effect's transaction (a crash between the two loses the effect or runs it
// twice), the key commits or rolls back with the effect.
//
// The key is the router handler's name and the message UUID (Config.Key):
// two handlers of one message each run once. Records older than
// Config.Retention are pruned every Config.PruneInterval by a goroutine
// Close stops; keep the retention longer than the longest a message can be
// redelivered (SQS keeps a message up to 14 days).
//
// What it cannot cover: effects outside the database (an HTTP call, an
// email) run again when a transaction rolls back after them; messages the
// handler publishes are published after the commit by the router, at least
// once (publish them with transport.PublishInTx inside the transaction when
// the publisher is a SQL transport on the same database).
package inbox
