// Package sqsbench holds Berth's SQS benchmark scenarios: Berth's SQS
// transport and github.com/ThreeDotsLabs/watermill-aws v1.0.1 side by side,
// in the same run, on the same endpoint (the fauxqs emulator in
// development), at the same handler concurrency.
//
// # Scenarios
//
// The package registers five scenarios with package bench when imported:
//
//   - "sqs/backlog": publish 10,000 messages, then consume them with 16
//     handlers that ack at once, until the queue is empty. Metrics:
//     msg_per_s, requests_per_consumed_msg, requests_per_published_msg,
//     publish_msg_per_s and the count of each operation.
//   - "sqs/steady": 100 messages a second, each published by its own
//     Publish call, for a minute, consumed by 16 handlers. Metrics:
//     requests_per_consumed_msg, requests_per_published_msg, p50_ms,
//     p99_ms, max_ms (publish to handler).
//   - "sqs/idle": both libraries watch an empty queue for a minute at once,
//     16 handlers each. Metrics: requests_per_minute_idle and
//     outstanding_long_polls (the most ReceiveMessage calls in flight at
//     once).
//   - "sqs/publish-sequential": 3,000 messages, one Publish call after the
//     other from one goroutine. Metrics: publish_msg_per_s,
//     requests_per_published_msg, p50_ms, p99_ms, rtt_p50_ms, rtt_p99_ms
//     (API calls as the SDK's caller sees them).
//   - "sqs/publish-concurrent": 1,000 messages a second for 30 s, each by
//     its own Publish call from a pool of 8 producers. Metrics:
//     requests_per_published_msg, msg_per_s, p50_ms, p99_ms (Publish
//     calls), rtt_p99_ms, arrival_p99_ms.
//
// The publish scenarios compare PublishStrategies: Berth, BerthLinger
// (PublishLinger 8ms) and WatermillAWS.
//
// bench.Env.Scale multiplies the backlog and the durations (the idle window
// is rounded up to whole 20 s steps, a whole number of long polls of
// either library).
//
// # Counting requests
//
// Requests are counted by a [Counter], an http.RoundTripper under the AWS
// SDK of both libraries: every HTTP request is one billed API request,
// retries included, whichever library sent it. Berth's own
// sqs.RequestCounter counts the same thing in the SDK's middleware; the
// HTTP layer is used here so that both libraries are counted by one
// mechanism.
//
// # Running
//
// The Go benchmarks run the scenarios at a tenth of their size against
// BERTH_TEST_SQS_ENDPOINT; BERTH_BENCH_SCALE=1 runs the documented size:
//
//	source .cache/test.env   # after make services-up
//	BERTH_BENCH_SCALE=1 go test -run '^$' -bench . -benchtime 1x -timeout 30m ./internal/bench/sqsbench/
//
// docs/benchmarks.md (section "SQS") records the results.
package sqsbench
