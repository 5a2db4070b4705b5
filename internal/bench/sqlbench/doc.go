// Package sqlbench is the SQL benchmark of issue 3: Berth's PostgreSQL
// transport against a classic peek-then-fan-out receive and against
// github.com/ThreeDotsLabs/watermill-sql/v4, on the same database, back to
// back in the same run. Importing it registers the scenarios sql/steady and
// sql/drain with package bench, for `berth bench`; the Go benchmarks
// BenchmarkSteady and BenchmarkDrain run them at a reduced scale:
//
//	go test -run '^$' -bench . -benchtime 1x ./internal/bench/sqlbench/
//
// with BERTH_TEST_POSTGRES_URL set (BERTH_BENCH_SCALE=1 for the full size).
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
// offset row lock.
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
package sqlbench
