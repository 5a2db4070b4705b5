// Package batching hands Watermill messages to a handler in batches, with
// acks held until each batch has ended and with the batch's members counted
// by the listener they came from, so back-pressure sees them.
//
// Watermill has no batch-consume API. The usual way to add one drains
// messages out of the subscriber's bounded buffer into a stage the
// subscriber cannot see: its depth reads zero, it keeps fetching, and
// memory grows without bound. A Berth listener counts what batching holds.
//
// # Batches
//
// A batch collects members until it holds Config.MaxSize of them or
// Config.MaxWait has passed since its first member arrived, then it is
// handed to a BatchFunc. With Config.Key each key has its own open batch.
// Config.Concurrency bounds the batches handled at once; a full batch waits
// for a slot without taking new members. Batches are not ordered among
// themselves; within a batch, members are in arrival order.
//
// # Outcomes
//
// Every member is acked or nacked exactly once, when its batch ends, never
// before: a crash while a batch is open or running loses nothing, the
// broker redelivers. The BatchFunc decides:
//
//   - nil: every member is acked;
//   - a *PartialError (see Fail), possibly wrapped: the members it names
//     are nacked with their own errors, the others acked;
//   - any other error, or a panic: every member is nacked.
//
// A member whose message context is done before its batch runs (a router
// timeout middleware, a subscriber giving up on the message, as a Berth
// subscriber does when it closes after its DrainTimeout) is taken out
// of the batch and nacked with ErrDiscarded; it is not handed to the
// BatchFunc. Once a batch runs, its members stay.
//
// # Router
//
// Two ways plug a BatchFunc into a Watermill router.
//
// A Subscriber wraps the router handler's subscriber and hands the router
// one message per batch; HandlerFunc adapts the BatchFunc to the router:
//
//	sub, err := batching.NewSubscriber(berthSub, cfg)
//	router.AddConsumerHandler("rows", "rows", sub, batching.HandlerFunc(insertRows))
//
// The router then runs one handler call per batch, and router middleware
// wraps the batch: a Retry middleware calls the BatchFunc again with the
// members that failed, a Timeout middleware bounds the call. This is the
// form to use for large batches or a slow BatchFunc: a held member costs
// what it costs under Consume (about 1.33× a 4 KiB payload; see
// docs/benchmarks.md).
//
// Handler.Handle is a message.NoPublishHandlerFunc for the subscriber
// itself. The Watermill router calls it once per message in its own
// goroutine and acks or nacks the message when it returns; Handle returns
// when the message's batch has ended, with the message's own outcome.
// Router middleware wraps each member, not the batch: a Retry middleware
// re-enters a failed member into a later batch, a Timeout middleware bounds
// how long a member may wait. Each held member keeps the router's goroutine
// (its descriptor and stack) and per-message router state: about 1.62× a
// 4 KiB payload on the heap, plus the goroutine's stack.
//
// Consume is the same without a router: it reads a Subscribe channel and
// acks or nacks each member itself.
//
// All three work over any Watermill subscriber.
//
// # Pending counts
//
// A message delivered by a Berth subscriber carries a tracker in its
// context. When it enters a batch, receiver.JoinBatch adds one to the
// pending count of the listener it came from and frees its concurrency
// permit: it now counts as batch pending instead of in flight, and the
// listener's QueueCount (buffered + in flight + batch pending) still holds
// it. When its batch ends — success, failure, partial failure, discard,
// shutdown — the count is settled exactly once, before the outcome is
// delivered. While a batch holds it, the receiver keeps no goroutine for
// it, and the discard hook is the tracker's rather than a
// context.AfterFunc: a held member costs its payload, its message, the
// member and a few small objects. A batch may mix members of several
// listeners; each is settled against its own. Messages without a tracker
// (published in-process, or from a non-Berth subscriber) are batched the
// same way and counted nowhere.
//
// Back-pressure is the listener's: above receiver.Config.MaxQueue it stops
// fetching and reports transport.StatusTooBusy, and it resumes at
// RestartQueue. So with a BatchFunc slower than arrivals, what batching
// holds stays bounded by the listener's limits.
//
// # Shutdown
//
// Handler.Close stops taking members, hands every open batch to the
// BatchFunc at once (or nacks its members, with Config.NackOnClose) and
// waits until every batch has ended. The final flush runs with a context
// that is not cancelled unless Close's own context ends first; then running
// batches see their context cancelled and batches still waiting for a slot
// are nacked without running. No member is ever both handled and nacked
// for redelivery by the batcher.
//
// Close the router before the Handler: the router stops delivering and waits
// for its running Handle calls, which end with their batches. Watermill's
// Router.Close can return while one handler call it started last is still
// waiting in an open batch; Handler.Close then flushes it.
//
// Consume does the same when its context is done or its channel closes,
// bounding the final flush with Config.FlushTimeout. So does a Subscriber
// when the router closes it (or a subscription's context is done): its open
// batches go to the router at once, and it closes the subscriber it wraps
// only after they have ended.
package batching
