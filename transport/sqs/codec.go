package sqs

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/transport"
)

// A Codec maps Watermill messages to SQS message bodies and message
// attributes and back: the wire format. The publisher calls Marshal for
// every message it sends (to a queue or, with SNS, to a topic whose queues
// get the same body and attributes through raw message delivery); the
// subscriber calls Unmarshal for every message it receives.
//
// Its method set is that of watermill-aws's sqs.Marshaler and
// sqs.Unmarshaler together, so a marshaler written for
// github.com/ThreeDotsLabs/watermill-aws works here unchanged.
//
// Marshal returns the body and the message attributes to send in
// Body and MessageAttributes; every other field is ignored (the publisher
// sets the FIFO group and deduplication ids and the delay from
// MetadataGroupID, MetadataDeduplicationID and MetadataDelay). The body must
// be at least one character of text SQS accepts, and there may be at most
// MaxAttributes attributes: the publisher rejects a message with more, and
// SQS rejects one breaking its other rules. An error fails the publish of
// that message only; wrap transport.ErrInvalidMessage when the message
// cannot be represented.
//
// Unmarshal gets the MessageId, Body and MessageAttributes of a received
// message (not its system attributes or receipt handle). It returns the
// Watermill message: a codec that finds no UUID should use the SQS message
// id. The subscriber then adds MetadataSQSMessageID, MetadataReceiveCount,
// MetadataSentTimestamp and, on FIFO queues, MetadataGroupID and
// MetadataDeduplicationID. An error (wrap ErrUndecodable) dead-letters the
// message with the error as the reason.
//
// Both methods are called concurrently.
type Codec interface {
	Marshal(msg *message.Message) (*types.Message, error)
	Unmarshal(msg *types.Message) (*message.Message, error)
}

// Codec names accepted by the URL parameter codec.
const (
	// CodecBerth selects BerthCodec, the default.
	CodecBerth = "berth"
	// CodecWatermillAWS selects WatermillAWSCodec.
	CodecWatermillAWS = "watermill-aws"
)

// codecNamed returns the codec a URL names.
func codecNamed(name string) Codec {
	if name == CodecWatermillAWS {
		return WatermillAWSCodec{}
	}
	return BerthCodec{}
}

// BerthCodec is Berth's own wire format and the default Codec. The UUID
// travels in AttributeUUID; metadata keys that are valid attribute names
// with non-empty values become String attributes of the same name, in key
// order, while they fit into SQS's 10; the rest is packed as JSON into
// AttributeMetadata, so any number of keys and any values travel. A payload
// that is not text SQS accepts is sent base64-encoded, flagged by
// AttributeBodyEncoding. Metadata keys the publisher consumes
// (MetadataGroupID, MetadataDeduplicationID, MetadataDelay) are not sent.
//
// Unmarshal takes attributes other tools set as metadata (String and Number
// values as they are, Binary values base64-encoded), and the SQS message id
// as the UUID of a message without AttributeUUID.
type BerthCodec struct{}

// Marshal encodes msg in Berth's format.
func (BerthCodec) Marshal(msg *message.Message) (*types.Message, error) {
	e, err := encode(msg)
	if err != nil {
		return nil, err
	}
	return &types.Message{Body: aws.String(e.body), MessageAttributes: e.attrs}, nil
}

// Unmarshal decodes a message in Berth's format. Undecodable attributes or
// body are an error wrapping ErrUndecodable.
func (BerthCodec) Unmarshal(m *types.Message) (*message.Message, error) {
	d, err := decode(aws.ToString(m.Body), m.MessageAttributes)
	if err != nil {
		return nil, err
	}
	id := d.uuid
	if id == "" {
		id = aws.ToString(m.MessageId)
	}
	msg := message.NewMessage(id, d.payload)
	msg.Metadata = d.metadata
	return msg, nil
}

// marshalReserve is Marshal leaving reserve attribute slots free, for the
// dead-letter copy.
func (BerthCodec) marshalReserve(msg *message.Message, reserve int) (*types.Message, error) {
	e, err := encodeReserve(msg, reserve)
	if err != nil {
		return nil, err
	}
	return &types.Message{Body: aws.String(e.body), MessageAttributes: e.attrs}, nil
}

// marshal encodes msg with c for the publisher: the codec's body and
// attributes and their size as SQS counts it. More than MaxAttributes
// attributes is an error wrapping transport.ErrInvalidMessage.
func marshal(c Codec, msg *message.Message) (encoded, error) {
	if c == nil {
		c = BerthCodec{}
	}
	m, err := c.Marshal(msg)
	if err != nil {
		return encoded{}, err
	}
	if m == nil {
		return encoded{}, fmt.Errorf("sqs: codec %T returned no message", c)
	}
	if n := len(m.MessageAttributes); n > MaxAttributes {
		return encoded{}, fmt.Errorf("sqs: codec %T: %d message attributes exceed SQS's limit of %d: %w", c, n, MaxAttributes, transport.ErrInvalidMessage)
	}
	e := encoded{body: aws.ToString(m.Body), attrs: m.MessageAttributes}
	e.size = messageSize(e.body, e.attrs)
	return e, nil
}

// unmarshal decodes a received message with c.
func unmarshal(c Codec, id string, raw *rawMessage) (*message.Message, error) {
	if c == nil {
		c = BerthCodec{}
	}
	msg, err := c.Unmarshal(&types.Message{MessageId: aws.String(id), Body: aws.String(raw.body), MessageAttributes: raw.attrs})
	if err != nil {
		return nil, err
	}
	if msg == nil {
		return nil, fmt.Errorf("%w: codec %T returned no message", ErrUndecodable, c)
	}
	if msg.Metadata == nil {
		msg.Metadata = make(message.Metadata)
	}
	return msg, nil
}

// deadLetterCopy encodes msg with c for the dead-letter queue, with one
// attribute slot left for AttributeDeadLetter. BerthCodec packs what does
// not fit; with other codecs the attributes that do not fit are dropped
// (the UUID attributes, AttributeBodyEncoding and AttributeMetadata last)
// and named in notes["dropped_attributes"]. A message c cannot encode is
// encoded in Berth's format instead, with the error in
// notes["codec_error"], so that it still reaches the dead-letter queue.
// notes are added to AttributeDeadLetter's object.
func deadLetterCopy(c Codec, msg *message.Message) (body string, attrs map[string]types.MessageAttributeValue, notes map[string]any, err error) {
	if c == nil {
		c = BerthCodec{}
	}
	notes = map[string]any{}
	var m *types.Message
	if r, ok := c.(interface {
		marshalReserve(*message.Message, int) (*types.Message, error)
	}); ok {
		m, err = r.marshalReserve(msg, 1)
	} else {
		m, err = c.Marshal(msg)
		if err == nil && m == nil {
			err = fmt.Errorf("sqs: codec %T returned no message", c)
		}
		if err != nil {
			notes["codec_error"] = err.Error()
			m, err = BerthCodec{}.marshalReserve(msg, 1)
		}
	}
	if err != nil {
		return "", nil, nil, err
	}
	attrs = make(map[string]types.MessageAttributeValue, MaxAttributes)
	names := slices.SortedFunc(maps.Keys(m.MessageAttributes), func(a, b string) int {
		if ka, kb := keepFirst(a), keepFirst(b); ka != kb {
			if ka {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var dropped []string
	for _, n := range names {
		switch {
		case n == AttributeDeadLetter: // replaced by this dead-lettering's
		case len(attrs) < MaxAttributes-1:
			attrs[n] = m.MessageAttributes[n]
		default:
			dropped = append(dropped, n)
		}
	}
	if len(dropped) > 0 {
		notes["dropped_attributes"] = dropped
	}
	return aws.ToString(m.Body), attrs, notes, nil
}

// keepFirst reports whether attribute n is kept before others when a
// dead-letter copy must drop some.
func keepFirst(n string) bool {
	return n == AttributeUUID || n == WatermillAWSUUIDAttribute || n == AttributeBodyEncoding || n == AttributeMetadata
}

// parseCodec reads the URL parameter codec.
func parseCodec(p *urlparam.Params) Codec {
	return codecNamed(p.Enum("codec", CodecBerth, CodecBerth, CodecWatermillAWS))
}
