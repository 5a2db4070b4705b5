// Package postgres is Berth's SQL queue transport on PostgreSQL, over
// github.com/jackc/pgx/v5 through database/sql.
//
// # Opening by URL
//
// Importing the package registers the schemes postgres:// and
// postgresql://. Connection parameters (sslmode, search_path,
// application_name, …) go to pgx; Berth's parameters (concurrency,
// consumer_group, lease, max_conns, schema, …) configure the transport.
// One URL serves both sides: a publisher accepts (checks, then ignores) the
// subscriber's parameters and a subscriber the publisher's; anything else
// is rejected, naming itself.
//
//	sub, err := transport.OpenSubscriber(ctx, "postgres://app@db/app?sslmode=disable&consumer_group=billing")
//
// # Pools
//
// Publishers and subscribers opened by URL, or with SubscriberConfig.DSN /
// PublisherConfig.DSN, share one process-wide pool per DSN (reference
// counted, closed with its last user), sized by max_conns (default
// DefaultSharedMaxConns, 10); its subscribers share one LISTEN connection.
// Pass DB (for example from Open) for a pool of your own.
//
// # Statements
//
// Claims use UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED)
// RETURNING over a partial index on pending rows; settlements pass arrays
// (unnest) so a batch of any size is one statement; dead-lettering is one
// data-modifying CTE. Inserts send NOTIFY on WakeChannel with the queue
// table as payload, once per statement and at most once per queue per
// notify_window (25ms) per publisher: an insert within the window leaves
// its NOTIFY out (an argument of the one statement text), the next insert
// after the window carries one, and when none comes a trailing NOTIFY
// goes out on its own after the skipped inserts committed (each NOTIFY
// costs every listening backend a transaction). Each pool's subscribers share one
// LISTEN connection, and wake-ups are debounced (wake_debounce). One LISTEN
// connection per queue, across processes, leads its wake-ups: it holds a
// session-level advisory lock (pg_try_advisory_lock, never waiting; the
// server drops it with the session), and the other connections UNLISTEN
// and leave the queue to their poll.
// Cluster-wide work takes transaction-scoped advisory locks.
package postgres
