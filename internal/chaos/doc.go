// Package chaos is Berth's proof of no loss: a harness that publishes
// uniquely identified messages to a real transport, consumes them with
// several subscriber instances while it injects faults on a schedule, and
// keeps a ledger of every publish and every successful handling.
//
// It is test and tooling infrastructure: `go run ./cmd/berth-chaos` runs it
// at full size, and the package's tests run it at a reduced size inside
// `make test`. docs/reliability.md publishes the full-size ledgers.
//
// # Instances
//
// Config.Instances subscriber instances consume one topic at once; even
// ones hand messages one at a time to a handler, odd ones through
// batching.Consume. Each instance reaches the broker through its own link:
// an in-process TCP proxy for PostgreSQL, an HTTP proxy for SQS, its own
// database handle for SQLite. Killing an instance cuts its link for good
// and abandons its handlers without acking or nacking (a process that
// died); its leases expire and the others take over. A fresh instance
// replaces it.
//
// # Faults
//
// One fault at a time, separated by Config.FaultInterval (jittered):
//
//   - pg_terminate_backend on every backend whose application_name carries
//     the run's prefix (never another session's);
//   - net_latency, net_reset, net_blackhole on the TCP proxies;
//   - http_5xx, http_throttle, http_timeout, net_latency on the SQS proxies;
//   - instance_kill: an instance abandoned without Close, then restarted;
//   - berth:<point>: a panic at one of Berth's own injection points
//     (transporttest.FaultySource and PanickingLogger, per run): receive,
//     map, begin, ack, nack, dead-letter, release, log.
//
// Handler errors and panics happen all along at Config.HandlerErrorRate and
// Config.HandlerPanicRate, on attempts 1 and 2 only, and every
// Config.PoisonEvery-th message is poison: always rejected.
//
// # Ledger
//
// The Report says how many messages were lost (published, not poison, never
// handled: must be 0), how many duplicate handlings happened (allowed,
// bounded by the faults injected), how many messages were dead-lettered
// (must be exactly the poison ones), how many rows or messages were left at
// the broker after a graceful close (must be 0), and, per fault, the time
// from the fault's end until handling progressed again with every listener
// reporting healthy, and which health reasons the health package reported
// meanwhile.
package chaos
