package batching

import (
	"context"
	"errors"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/berth-go/berth/internal/guard"
)

// Consume reads msgs (a channel from message.Subscriber.Subscribe), groups
// them into batches, hands each batch to fn and acks or nacks every member
// when its batch has ended. It returns nil when msgs is closed and ctx's
// error when ctx is done.
//
// Either way Consume stops reading and ends the open batches before it
// returns: they are handed to fn (or nacked, with Config.NackOnClose) with a
// context that stays live for Config.FlushTimeout, so the final flush is not
// cancelled before it starts. If the flush outlasts FlushTimeout, fn's
// context is cancelled, batches not yet started are nacked, and Consume waits
// for fn to return.
//
// Consume logs failed batches at error level on Config.Logger, once per
// batch.
func Consume(ctx context.Context, msgs <-chan *message.Message, cfg Config, fn BatchFunc) error {
	b, err := newBatcher(ctx, cfg, fn)
	if err != nil {
		return err
	}
	b.logFailures = true
	return b.consume(ctx, msgs)
}

// consume is Consume's loop, shared with Subscriber: it adds every message
// of msgs to its batch until ctx is done or msgs is closed, then closes b,
// bounding the final flush with FlushTimeout.
func (b *batcher) consume(ctx context.Context, msgs <-chan *message.Message) error {
	var stop error
	for stop == nil {
		if err := ctx.Err(); err != nil {
			stop = err
			break
		}
		select {
		case <-ctx.Done():
			stop = ctx.Err()
		case msg, ok := <-msgs:
			if !ok {
				stop = errChannelClosed
				break
			}
			if _, err := b.add(msg, ackOrNack(msg)); err != nil {
				guard.Do(func() { b.cfg.Logger.Error("Cannot batch message", err, watermill.LogFields{"message_uuid": msg.UUID}) })
				msg.Nack()
			}
		}
	}
	if stop == errChannelClosed {
		stop = nil
	}

	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.FlushTimeout)
	defer cancel()
	return errors.Join(stop, b.close(fctx))
}

var errChannelClosed = errors.New("channel closed")

func ackOrNack(msg *message.Message) func(error) {
	return func(err error) {
		if err == nil {
			msg.Ack()
		} else {
			msg.Nack()
		}
	}
}
