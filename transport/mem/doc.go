// Package mem is Berth's in-process transport: a Broker holding one queue
// per (topic, consumer group) with visibility timeouts, attempt counts,
// delayed redelivery and a dead-letter list, consumed through the shared
// receive pipeline like every other transport. It is the transport for
// users' unit tests, and it registers the mem:// scheme.
//
// # Opening by URL
//
// mem://NAME selects the process-wide broker called NAME (created on first
// use), so a publisher and a subscriber opened from the same URL talk to
// each other. Query parameters: consumer_group, visibility_timeout and the
// pipeline's (concurrency, buffer, max_attempts, retry_delay, …); a
// publisher accepts them too (checked, then ignored), so one URL serves
// both sides.
//
// # Delays
//
// A message whose metadata has MetadataDelay ("berth_delay", a Go duration)
// is first delivered after that delay, and so is one delayed with
// Watermill's components/delay (delay.Message, delay.NewPublisher), to the
// nanosecond; berth_delay wins over Watermill's keys. Publisher.Publish
// refuses a malformed delay with transport.ErrInvalidMessage naming the
// key; Broker.Publish, which cannot fail, reads it as none.
package mem
