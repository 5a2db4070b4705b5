// Package receiver is the shared receive stage between a listener's receive
// loop and Watermill: a bounded buffer of claimed deliveries, concurrency
// permits, the lease gate, delivery on the Subscribe channel, and
// settlement.
//
// # Data path
//
// The listener pushes claimed deliveries into the buffer (never more than
// Free reports). The dispatcher takes a concurrency permit, then the oldest
// delivery, and processes it: Source.Map turns it into a message and the raw
// payload is dropped; Source.Begin gates it (zero rows touched means the
// lease was lost and user code never runs); the attempt and broker id go
// into metadata; the message goes out on the channel; its Ack completes it,
// its Nack retries it after an exponential delay, or dead-letters it once
// MaxAttempts is reached, with the reason the handler recorded
// (transport.SetNackReason, transport.DeadLetterReason) after the attempt
// count. A message that enters a batching stage
// (transport.EnterBatch, transport.JoinBatch) frees its permit and its
// goroutine while the batch holds it: nothing watches it until the stage
// settles it at the end of its batch, when a goroutine waits for the ack or
// nack that follows. A batch may hold thousands of messages; a parked
// goroutine per message would cost more heap than anything but the payload.
//
// # Faults
//
// Every goroutine runs under a recover guard and every settlement and
// logging path is guarded too. A panic anywhere records a terminal fault
// (atomically, before any logging), stops the stage from taking new work,
// and hands what it held back to the broker; the listener's watchdog then
// disposes of the receiver and builds a new one.
//
// # Closing
//
// Close releases buffered deliveries at once, lets in-flight messages be
// settled until its context is done, then hands the rest back for
// redelivery, those a batch holds included: their contexts are cancelled,
// so the batch discards them. Settlement never uses an already cancelled
// context.
package receiver
