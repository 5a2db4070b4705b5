// Package sqlserver is Berth's SQL Server transport: Watermill publishers
// and subscribers over queue tables, on the dialect-neutral engine of
// package sqlqueue, through github.com/microsoft/go-mssqldb. It is the
// primary SQL dialect; PostgreSQL and SQLite run the same engine.
//
// # Opening
//
// Import the package to register the sqlserver:// scheme, then open by URL:
//
//	sub, err := transport.OpenSubscriber(ctx,
//		"sqlserver://app:secret@db:1433?database=queues&consumer_group=billing&concurrency=32")
//
// or build a config and call NewSubscriber / NewPublisher. Both open their
// own pool from DSN (closed with them), or use a *sql.DB you pass in
// SubscriberConfig.DB (then you close it). A publisher bound to your own
// transaction, for the outbox pattern, is Publisher.WithTx.
//
// # URL parameters
//
// A sqlserver:// URL is go-mssqldb's URL (user, password, host, port,
// instance as the path) with two kinds of query parameters side by side.
// go-mssqldb's own (ConnParams: database, encrypt, TrustServerCertificate,
// "app name", "connection timeout", …, matched without regard to case) stay
// in the DSN handed to the driver. Berth's are taken out first: the
// pipeline's (concurrency, buffer, max_attempts, retry_delay,
// max_retry_delay, drain_timeout, wave_cap, empty_delay, max_queue,
// restart_queue, check_interval), the engine's (schema, table_prefix,
// manual_schema; subscribers: consumer_group, lease, fetch_timeout,
// sweep_interval; publishers: max_message_size, delay, ttl) and max_conns.
// One URL serves both sides: each side accepts the other side's parameters
// (checked, then ignored). Any other parameter is an error naming it and
// listing those accepted.
//
// # Requirements
//
// SQL Server 2016 or later (or Azure SQL Database / Managed Instance) with
// database compatibility level 130 or higher: settlement statements pass
// their id/owner pairs as one JSON argument read by OPENJSON. The session
// must run at READ COMMITTED (READ_COMMITTED_SNAPSHOT on the database is
// fine: claims read with READCOMMITTEDLOCK) or REPEATABLE READ, with the
// SET options filtered indexes need (go-mssqldb's defaults). Dialect.Check
// verifies all of this when a publisher or subscriber starts and reports
// every problem at once; a SNAPSHOT session is rejected. A connection the
// pool hands out later may carry another level (SQL Server does not reset
// it): every batch Berth sends on its own account sets READ COMMITTED at
// its head, while those inside a caller's transaction (PublishInTx, the
// handler's transaction) run at the caller's level.
//
// A message (metadata and payload) is at most MaxMessageSize, 16 MiB:
// PublisherConfig.MaxMessageSize may not be set higher.
//
// Permissions: SELECT, INSERT, UPDATE, DELETE on the tables, and EXECUTE
// on sp_getapplock (public by default). Creating the schema needs CREATE
// TABLE (and ALTER on the schema, or CREATE SCHEMA when Tables.Schema names
// a missing one); with Tables.ManualSchema a DBA applies DDL instead.
//
// # Statements
//
// Every statement is in dialect.go (the sweeper's stray-row move in
// stray.go) and pinned, text and arguments, by golden tests. A claim is
// one batch: it picks the due rows from a filtered index on pending rows
// into a table variable (READPAST, READCOMMITTEDLOCK, no range locks,
// DEADLOCK_PRIORITY LOW), skipping keyed rows behind an unsettled row of
// their key, then takes them with an UPDATE joined to that variable,
// fenced on state, so concurrent instances skip each other's rows instead
// of waiting and claimed rows leave the claim path. Direct claims set the
// rows the listener can start at once to processing and may carry the
// acks waiting to be sent (one statement per message at light load);
// key claims take the next row of the keys their acks settled. Rows come
// back through OUTPUT … INTO a table variable, which works on tables with
// triggers. Settlements pass their refs as one JSON argument (OPENJSON),
// pinned to seeks of the primary key and fenced by id, owner token and
// state; sweeps and keyed inserts run in transactions of their own. Time
// is the server's (SYSUTCDATETIME, datetime2(3)).
// docs/transports/sqlserver.md explains each statement, and says what has
// and has not been verified against a live server.
//
// # Wake-ups
//
// SQL Server has no NOTIFY. A Publish wakes the subscribers of the same
// process at once (the engine's in-process notifier); subscribers in other
// processes find new rows on their next claim, at most the wave
// controller's empty delay later.
package sqlserver
