// Package sqlbench is the SQL benchmark of issue 3: Berth's PostgreSQL
// transport against a classic peek-then-fan-out receive and against
// github.com/ThreeDotsLabs/watermill-sql/v4, on the same database, back to
// back in the same run; and Berth's SQL Server transport alone on SQL Server
// (see SQL Server below). Importing it registers the scenarios sql/steady,
// sql/drain and sql/idle with package bench, for `berth bench`, which runs them on
// each database it is given; the Go benchmarks BenchmarkSteady and
// BenchmarkDrain (PostgreSQL) and BenchmarkSQLServerSteady and
// BenchmarkSQLServerDrain run them at a reduced scale:
//
//	go test -run '^$' -bench . -benchtime 1x ./internal/bench/sqlbench/
//
// with BERTH_TEST_POSTGRES_URL and/or BERTH_TEST_SQLSERVER_URL set
// (BERTH_BENCH_SCALE=1 for the full size).
//
// # Scenarios
//
// sql/steady: 12 competing subscriber instances, each with its own pool of 4
// connections (as separate processes would have) and handler concurrency
// 256, each handler sleeping 50 ms, under a steady 400 msg/s for 60 s (one
// message per Publish call). sql/drain: a 20,000-message backlog, published
// before the subscribers start, drained by 1, 4 and 12 instances with a 1 ms
// handler. bench.Env.Scale shortens the steady run and shrinks the backlog.
//
// sql/idle (RunIdle; also BenchmarkIdle, configured by BERTH_IDLE_*
// variables): 50 queues × 1 and 3 instances, each instance with its own
// pool subscribing to every queue, nothing published; after a 30 s warm-up,
// the transactions per second over a 60 s window of a database the run
// creates for itself (pg_stat_database), per listener, the connections, then
// the first-message latency after idle. PostgreSQL only, Berth alone (River,
// side by side, is the separate module internal/bench/river, which keeps it
// out of Berth's go.mod). bench.Env.Scale shortens the warm-up, the window
// and the pause between the two latency rounds.
//
// sql/ordered (RunOrdered; also BenchmarkOrdered): a 20,000-message
// backlog drained by 4 instances × concurrency 64 with a 1 ms handler,
// without ordering keys, with 1,000 keys and with 10 keys, each 3 times
// interleaved (medians reported), on PostgreSQL when configured and on
// SQLite (a temporary file) always: ordered against unordered throughput
// and statements per message (issue 21).
//
// # Strategies
//
// "berth" is transport/postgres (the shared pipeline's wave-sized claims, no
// peek). "peek-baseline" is the receive of classic SQL transports
// (NServiceBus.SqlServer's message pump): a count query, then that many
// single-row receives, each waiting for a concurrency slot, on Berth's own
// engine (same table, claim statement, lease gate, group-committed
// settlements and wake-ups) so that only the receive strategy differs.
// "watermill-sql" is watermill-sql's documented PostgreSQL setup
// (DefaultPostgreSQLSchema, DefaultPostgreSQLOffsetsAdapter), which delivers
// one message at a time per subscription while holding the consumer group's
// offset row lock. "limit" (sql/drain on PostgreSQL only) is a minimal
// hand-written pgx loop on Berth's table: two claims of up to 64 rows in
// flight per instance, straight into processing, batched deletes; Berth's
// drain results carry their ratio to it (ratio_to_limit). RunIsolated runs
// one configuration in a database of its own and adds the server's
// transactions (db_tx_per_msg) and the wake-up NOTIFYs (notifies_per_msg).
//
// # Measurements
//
// Round trips are counted on the wire by a net.Conn wrapper installed as
// pgx's DialFunc (a write that follows a reply is one round trip: prepares,
// pings, BEGIN/COMMIT and handshakes count); statements by a pgx query
// tracer, cross-checked with pg_stat_statements when the server preloads it
// (the harness then uses its own role, AuxRole, for publishing and setup, so
// that only the subscribers' statements are summed). Empty claims are
// receive statements (claims, polling SELECTs, peeks) that found nothing.
// DB CPU is the server's CPU time from /proc (the postmaster with its reaped
// children plus every live child, minus the harness's own backends), so it
// needs the server on the same machine. Latency is publish to ack, handler
// included. Counters are read after the subscribers close.
//
// # SQL Server
//
// With a sqlserver:// URL (go-mssqldb's parameters only) the same scenarios
// run Berth's transport/sqlserver, each run in a fresh schema that is
// dropped afterwards (every table, then the schema: SQL Server has no DROP
// SCHEMA … CASCADE). Only "berth" runs there (SQLServerStrategies):
// watermill-sql has no SQL Server adapter and the peek baseline's count
// query is PostgreSQL's. Round trips are counted by the same net.Conn
// wrapper, installed as go-mssqldb's Connector.Dialer (a TDS request of
// several packets is one round trip; the pre-login and TLS handshakes
// count); statements, receives and empty claims are the engine's own counts
// (sqlqueue.Stats: every statement it sent, BEGIN and COMMIT included). The
// server side comes from dynamic management views, which need VIEW SERVER
// STATE (VIEW SERVER PERFORMANCE STATE from SQL Server 2022); without it the
// results say "server CPU unavailable (VIEW SERVER STATE)" and carry none of
// these:
//   - db_cpu_ms_per_msg: the growth over the run of total_worker_time in
//     sys.dm_exec_query_stats, summed over the cached statements whose text
//     names the run's schema, less the publisher's INSERT and subscription
//     lookup (told apart by their text). Statements only: logins and plan
//     compilation are not in it, and a plan evicted (or, we expect, a
//     statement recompiled) during the run may take what it had accumulated
//     with it, so read it as a lower bound. db_cpu_mid_ms_per_msg is the
//     same over the middle 80% of a drain.
//   - client_cpu_mid_ms_per_msg: the benchmark process's own CPU time
//     (user and system: the instances, the handlers and the harness) over
//     the middle 80% of a drain, per message.
//   - db_session_cpu_ms_per_msg: cpu_time in sys.dm_exec_sessions (plus
//     sys.dm_exec_requests for a request still running) of the subscriber
//     instances' sessions, found by the "app name" the harness gives their
//     connections, read at the last ack (a closed session leaves the view),
//     so the instances' closing is not in it.
//   - db_tx_per_msg and db_write_tx_per_msg: the growth of the database's
//     "Transactions/sec" and "Write Transactions/sec" counters in
//     sys.dm_os_performance_counters (running totals despite their names),
//     for the whole database: the steady publisher's transactions and
//     anything else using the database count too.
//
// The server's CPU from /proc, pg_stat_statements and the peek and
// watermill-sql strategies have no SQL Server counterpart here.
package sqlbench
