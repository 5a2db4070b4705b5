package sqs

import "github.com/berth-go/berth/transport"

// fifoSource is the source of a FIFO queue: a Source that also names each
// delivery's message group as its sequence key, so that the pipeline has
// at most one message per group in flight, in receive order (see
// transport.Sequencer and docs/ordering.md#sqs-fifo).
//
// SQS hands out a group's messages one batch at a time: while a message of
// a group is in flight, no later message of the group is returned to
// anyone. But one ReceiveMessage may return several messages of a group,
// and the pipeline would otherwise handle those concurrently. With the
// group as key, the later ones wait in the buffer (renewed by the
// visibility heartbeat) until the earlier one is deleted; if the earlier
// one is nacked, dead-lettered or handed back instead, they are released
// (visibility 0) rather than handled. Releasing them is safe: the earlier
// message is invisible again (a nack's retry delay) or visible before
// them, and SQS returns a group's messages in order, never a later one
// while an earlier one is in flight, so the group resumes with the earlier
// message, on whichever consumer receives it.
//
// Standard queues get the plain *Source: no key, no per-message cost.
type fifoSource struct{ *Source }

var _ transport.Sequencer = (*fifoSource)(nil)

// SequenceKey returns the delivery's MessageGroupId.
func (s *fifoSource) SequenceKey(d *transport.Delivery) string {
	return d.Handle.(*handle).groupID
}
