package transporttest

import (
	"encoding/hex"
	"hash/fnv"
	"testing"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/berth-go/berth/transport"
)

// RunWatermillKeyed runs Watermill's suite once more with an ordering key
// on every message, derived from its payload (payloadKey), and order
// declared as guaranteed: TestPublishSubscribeInOrder then checks, across
// the ten subscribers of one consumer group it builds, that each of its
// sixteen message types arrives in publish order, and TestNoAck that a
// message is not delivered while the earlier one of its key is un-acked.
// Messages with distinct payloads get distinct keys, so the rest of the
// suite runs keyed through the same paths as without keys.
//
// It runs at Watermill's short size (ForceShort): several tests publish
// every message with the same payload, so all of them share one key and
// are handled one after another; the full size runs without keys.
func RunWatermillKeyed(t *testing.T, c Config) {
	f := c.Features
	f.GuaranteedOrder = true
	// Order holds across the consumer group, so the in-order test runs
	// with ten subscribers rather than one.
	f.GuaranteedOrderWithSingleSubscriber = false
	f.ForceShort = true
	newPubSub := func(t *testing.T) (message.Publisher, message.Subscriber) {
		pub, sub := c.NewPubSub(t)
		return keyedPublisher{pub}, sub
	}
	var newGroup tests.ConsumerGroupPubSubConstructor
	if c.NewConsumerGroupPubSub != nil {
		newGroup = func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			pub, sub := c.NewConsumerGroupPubSub(t, group)
			return keyedPublisher{pub}, sub
		}
	}
	tests.TestPubSub(t, f, newPubSub, newGroup)
}

// keyedPublisher sets every published message's ordering key from its
// payload, unless it already has one.
type keyedPublisher struct{ message.Publisher }

func (p keyedPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.Metadata.Get(transport.MetadataOrderingKey) == "" {
			m.Metadata.Set(transport.MetadataOrderingKey, payloadKey(m.Payload))
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// payloadKey is the payload itself when it is short UTF-8 text (Watermill's
// suite uses "0"…"15" as message types, "x", or a sequence number), else a
// hash of it; an empty payload gets a key of its own too.
func payloadKey(payload []byte) string {
	if len(payload) > 0 && len(payload) <= 64 && utf8.Valid(payload) {
		return "p:" + string(payload)
	}
	h := fnv.New64a()
	_, _ = h.Write(payload)
	return "h:" + hex.EncodeToString(h.Sum(nil))
}
