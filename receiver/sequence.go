package receiver

import (
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// Sequenced dispatch, for sources that implement transport.Sequencer (SQS
// FIFO): at most one delivery per key is taken from the buffer until it is
// settled, in claim order. The rest of a key waits in the buffer, where it
// counts toward BufferSize and back-pressure and is renewed with the
// deliveries in flight (renew.go). When the delivery in flight is
// acknowledged, the key's next buffered delivery may go; when it ends any
// other way, the key's buffered deliveries are released untouched, since
// the broker will hand the earlier one out again and they must not
// overtake it. Without a Sequencer none of this runs.

// nextIndex returns the index in r.buf of the oldest delivery whose key has
// nothing in flight, and marks its key busy; -1 when every buffered
// delivery waits for its key. r.mu is held.
func (r *stage) nextIndex() int {
	for i, d := range r.buf {
		key := r.seq.SequenceKey(d)
		if key == "" {
			return i
		}
		if _, busy := r.busy[key]; !busy {
			r.busy[key] = struct{}{}
			return i
		}
	}
	return -1
}

// keyDone frees d's key once d is settled or dropped; acked reports a
// successful acknowledgement. Otherwise the key's buffered deliveries are
// released (see above).
func (r *stage) keyDone(d *transport.Delivery, acked bool) {
	if r.seq == nil {
		return
	}
	key := r.seq.SequenceKey(d)
	if key == "" {
		return
	}
	var back []*transport.Delivery
	r.mu.Lock()
	delete(r.busy, key)
	if !acked {
		kept := r.buf[:0]
		for _, b := range r.buf {
			if r.seq.SequenceKey(b) == key {
				back = append(back, b)
			} else {
				kept = append(kept, b)
			}
		}
		clear(r.buf[len(kept):])
		r.buf = kept
	}
	r.mu.Unlock()
	select {
	case r.avail <- struct{}{}:
	default:
	}
	if len(back) > 0 {
		r.logDebug("ordering: the key's earlier message was not acknowledged; its later buffered messages are handed back",
			watermill.LogFields{"id": d.ID, "handed_back": len(back)})
		r.changed()
		r.release(back)
	}
}

// keyed reports whether d (mapped to msg) has an ordering key: the
// Sequencer's, or else transport.MetadataOrderingKey.
func (r *stage) keyed(d *transport.Delivery, msg *message.Message) bool {
	if r.seq != nil && r.seq.SequenceKey(d) != "" {
		return true
	}
	return msg != nil && msg.Metadata.Get(transport.MetadataOrderingKey) != ""
}
