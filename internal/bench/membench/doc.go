// Package membench is the batching memory benchmark (scenario
// "batching/memory"): a flood of messages into a batch handler far slower
// than arrivals, over a real transport, with the process's heap and RSS
// sampled over time. It shows that a Berth listener, which counts what
// batching holds in its QueueCount, keeps memory bounded, and — with the
// benchmark-only switch subopt.Options.IgnoreBatchPending — how memory grows
// when back-pressure cannot see the batching stage.
//
// Importing the package registers the scenario with internal/bench, for
// `berth bench`. Run runs one flood with any Config; the package's Go
// benchmark runs both at reduced scale:
//
//	go test -run '^$' -bench . ./internal/bench/membench/
//
// # The flood
//
// One SQLite database in a temporary file (no network, no shared server).
// Half the messages (Config.Preload) are inserted before the consumer
// starts — the backlog a restarted service finds — and one publisher
// goroutine publishes the rest at Config.ArrivalRate (10,000 per second by
// default) while it runs, one Publish of 50 messages at a time from one
// reused payload buffer, so the publisher's own memory stays small and
// constant. The consumer is a Watermill router whose handler is a
// batching.Handler, or batching.Consume (Config.Consume). The BatchFunc
// sleeps len(batch) × SlowFactor / ArrivalRate, one batch at a time: with
// the defaults it handles 1,000 messages per second, 10× slower than
// arrivals. The listener runs with the default pipeline (MaxQueue 1000,
// wave cap 64).
//
// With accounting on, the run ends when every message has been handled
// once (a ledger counts handlings by message number: nothing lost, no
// duplicates). With accounting off, it ends as soon as the queue table has
// drained into memory, or when heap in use passes Config.HeapCap (2 GiB) or
// the resident set Config.RSSCap (4 GiB), so it cannot take the machine
// down.
//
// # Measurements
//
// Every Config.SampleInterval (100ms) the sampler reads runtime/metrics
// (heap in use = heap objects + heap fragmentation, live heap as marked by
// the last GC, goroutine stacks) and VmRSS from /proc/self/status, and the
// listener's State. The Result carries the series heap_inuse_bytes,
// rss_bytes, heap_live_bytes, stack_bytes, held_messages and
// handled_messages, and metrics: peaks, the baseline taken after a forced
// GC before the flood, the heap target
// ((MaxQueue + one wave) × 2 × payload + 64 MiB), bytes per held message
// (live heap over held count at steady state, and the least-squares slope
// of live heap against held count) and the flatness of heap in use over the
// steady middle of the run.
//
// Memory is measured process-wide: runs must not overlap with each other or
// with other work in the same process. Run the floods with accounting on
// first: the Go runtime never frees the g structs of exited goroutines
// (about 480 bytes each), so a flood without accounting, which parks one or
// two goroutines per held message, leaves the heap larger for good, and
// with it the GC's heap target of every later run.
package membench
