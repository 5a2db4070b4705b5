// Package receiver is Berth's whole receive pipeline, shared by every
// transport: a transport supplies a transport.Source and builds its
// Watermill subscriber with one NewSubscriber call over a source factory;
// each Subscribe runs a [Listener] over a fresh source.
//
// # Files
//
// The listener (listener.go) runs the receive loop (loop.go): waves sized by
// package wave, never more than the stage's free space, error backoff,
// empty delays ended early by a source's wake-ups. Back-pressure
// (backpressure.go) latches above MaxQueue; the watchdog (watchdog.go)
// applies it on every count change, detects a stalled stage and rebuilds a
// faulted one; state.go reports it all. The stage (stage.go) is what the
// listener drives: dispatch.go, flight.go, settle.go, renew.go, close.go,
// and sequence.go for sources that implement transport.Sequencer.
// pending.go and nackreason.go are what batching stages and handlers call.
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
// ([SetNackReason], [DeadLetterReason]) after the attempt count (with
// Config.OrderedNack = OrderedNackDeadLetter, a message with an ordering
// key is dead-lettered on its first nack). The listener's idle wait ends
// when a retry it issued falls due, so a retry shorter than the empty
// delay is handled on time (loop.go). With Concurrency 1 (and
// Config.RetryInPlace left at RetryInPlaceAuto) a nack that does not
// dead-letter retries in place: the flight keeps the only permit and its
// lease, waits the retry delay, and hands a copy of the message to the
// handler again with the attempt counted, so no later message overtakes
// it; Close during the wait hands it back (flight.go, again). For a transport.Sequencer
// source the dispatcher takes the oldest delivery whose key has nothing in
// flight instead (sequence.go).
//
// A permit is held while user code holds the message: once it acks or
// nacks, the settlement moves to a settle slot when one is free (there are
// Concurrency of them), and the permit goes to the next delivery without
// waiting for the broker's round trip; with every slot taken, the
// settlement runs on its permit, so user code waits for the broker instead
// of outrunning it. A worker goroutine that has settled a delivery on its
// permit takes the next ready one itself; one that finds none, or settled
// on a slot, lingers briefly, without a permit, for the dispatcher to hand
// it the next: a busy stage reuses its workers instead of starting a
// goroutine per delivery. A message that enters a batching stage
// ([EnterBatch], [JoinBatch]) frees its permit and its goroutine while the
// batch holds it: nothing watches it until the stage
// settles it at the end of its batch, when a goroutine waits for the ack or
// nack that follows. A batch may hold thousands of messages; a parked
// goroutine per message would cost more heap than anything but the payload.
//
// # Faults
//
// Every goroutine runs under a recover guard and every settlement, logger
// and observer call is guarded too (internal/guard). A panic in the source
// or the logger records a terminal fault (atomically, before any logging),
// stops the stage from taking new work, and hands what it held back to the
// broker; the listener's watchdog then disposes of the stage and builds a
// new one. A panicking observer is ignored.
//
// # Closing
//
// [Listener.Close] and [Subscriber.Shutdown] work like
// http.Server.Shutdown: buffered deliveries are released at once, in-flight
// messages may be settled until the context is done; then the rest are
// handed back for redelivery, those a batch holds included (their contexts
// are cancelled, so the batch discards them), and Close returns an error
// wrapping the context's. Handing back runs at most [Config.CloseGrace] past
// the context, whatever the broker or a consumer that stopped reading the
// channel does. After a clean drain Close returns nil.
package receiver
