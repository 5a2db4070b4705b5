package batching

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
)

// A Handler batches the messages of a Watermill router handler. Its Handle
// method is a message.NoPublishHandlerFunc:
//
//	h, err := batching.NewHandler(batching.Config{MaxSize: 50}, insertRows)
//	...
//	router.AddConsumerHandler("rows", "rows", sub, h.Handle)
//
// (AddNoPublisherHandler, deprecated in Watermill v1.5, works the same.)
// The router calls Handle once per message, each in its own goroutine, and
// acks the message when Handle returns nil, nacks it otherwise. Handle adds
// the message to a batch and blocks until that batch has ended, then returns
// the message's own outcome, so a message is acked only after its batch was
// handled and a crash before that loses nothing.
//
// One Handler may serve several router handlers (and so several topics or
// listeners); a batch then mixes their messages, and each is counted against
// its own listener.
//
// Every message a Handler holds keeps a router goroutine parked in Handle.
// For large batches or a slow BatchFunc, a Subscriber, which gives the
// router one message per batch, holds the same messages in less memory.
type Handler struct {
	b *batcher
}

// NewHandler returns a Handler that hands batches to fn. It reports an
// invalid cfg or a nil fn as transport.ErrInvalidConfig.
func NewHandler(cfg Config, fn BatchFunc) (*Handler, error) {
	b, err := newBatcher(context.Background(), cfg, fn)
	if err != nil {
		return nil, err
	}
	return &Handler{b: b}, nil
}

// Handle adds msg to its batch, waits until the batch has ended and returns
// msg's outcome: nil when it succeeded; an error wrapping the BatchFunc's
// error, the member's error from a PartialError or ErrMemberFailed when it
// failed; ErrDiscarded (joined with the context's cause) when msg's context
// was done before its batch ran; transport.ErrClosed after Close.
//
// Handle has the signature of message.NoPublishHandlerFunc. Called directly,
// the caller acks or nacks msg by the returned error.
func (h *Handler) Handle(msg *message.Message) error {
	m, err := h.b.add(msg, nil)
	if err != nil {
		return err
	}
	return m.wait()
}

// Close stops the Handler: Handle rejects new messages with
// transport.ErrClosed, open batches are handed to the BatchFunc at once (or
// nacked, with Config.NackOnClose), and Close waits until every batch has
// ended. If ctx is done first, the BatchFunc's context is cancelled, batches
// that have not started are nacked, and Close still waits for running
// BatchFuncs to return before it returns ctx's error.
//
// Close the router first: it stops delivering and waits for its running
// Handle calls, which end with their batches. Close is idempotent and safe
// to call concurrently.
func (h *Handler) Close(ctx context.Context) error {
	return h.b.close(ctx)
}
