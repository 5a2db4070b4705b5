// Package benchmode holds switches that only benchmarks flip, to measure
// what a safeguard prevents. Production code never sets them.
package benchmode

import "sync/atomic"

// IgnoreBatchPending leaves batch-pending messages out of every listener's
// QueueCount (and so out of back-pressure), reproducing the unbounded growth
// of batching stages that the listener cannot see.
var IgnoreBatchPending atomic.Bool
