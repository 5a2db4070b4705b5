package sqs

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/transport"
)

// WatermillAWSUUIDAttribute is the message attribute in which
// github.com/ThreeDotsLabs/watermill-aws carries the message UUID (its
// sqs.UUIDAttribute).
const WatermillAWSUUIDAttribute = "_watermill_message_uuid"

// WatermillAWSCodec is the wire format of github.com/ThreeDotsLabs/watermill-aws
// v1.0.x (the DefaultMarshalerUnmarshaler of its sqs package, whose
// attributes its sns package writes too), so that Berth and watermill-aws
// services can publish to and consume from the same queues while a fleet
// moves one service at a time. URL: codec=watermill-aws.
//
// Marshal writes what watermill-aws writes: the payload unchanged as the
// body, the UUID as the String attribute WatermillAWSUUIDAttribute, and each
// metadata key as a String attribute of the same name. Where watermill-aws
// would send something SQS rejects, it differs:
//   - a metadata value that is not text SQS accepts (control characters,
//     invalid UTF-8) is sent as a Binary attribute, which watermill-aws
//     reads back as the same bytes;
//   - metadata with an empty value is not sent (SQS rejects empty
//     attribute values; Metadata.Get returns "" either way), nor is an empty
//     UUID (the receiver then uses the SQS message id, as watermill-aws
//     does);
//   - metadata keys Berth's transports consume or set on every delivery are
//     not sent: MetadataGroupID, MetadataDeduplicationID and MetadataDelay
//     (the publisher reads them), MetadataSQSMessageID,
//     MetadataReceiveCount, MetadataSentTimestamp, transport.MetadataAttempt
//     and transport.MetadataMessageID (they describe the delivery a
//     message came from and a Berth receiver sets them afresh). A metadata
//     key WatermillAWSUUIDAttribute gives way to the UUID, as in
//     watermill-aws.
//
// What watermill-aws's format cannot carry is an error wrapping
// transport.ErrInvalidMessage, before anything is sent: more than 9
// metadata keys besides the UUID (SQS allows 10 attributes and the format
// has one per key; use BerthCodec, which packs the rest), a metadata key
// that is not a valid attribute name (A-Z a-z 0-9 _ - ., at most 256, no
// "AWS." or "Amazon." prefix) or is one of Berth's AttributeUUID,
// AttributeMetadata, AttributeBodyEncoding, an empty payload (SQS requires
// a body), a payload that is not text SQS accepts (binary; watermill-aws
// sends the body unchanged), and a UUID that is not.
//
// Unmarshal reads what watermill-aws reads: the UUID from
// WatermillAWSUUIDAttribute (else the SQS message id), the body as the
// payload, and every other attribute as metadata (String and Number values
// as they are, Binary values as their bytes; custom types such as
// "String.json" too, which watermill-aws skips). A message carrying
// AttributeUUID, AttributeMetadata or AttributeBodyEncoding is in Berth's
// format and is read as BerthCodec reads it, so a queue can take both
// formats while its publishers change codec. Unmarshal never fails on a
// message in watermill-aws's format.
type WatermillAWSCodec struct{}

// Marshal encodes msg in watermill-aws's format.
func (WatermillAWSCodec) Marshal(msg *message.Message) (*types.Message, error) {
	switch {
	case len(msg.Payload) == 0:
		return nil, wmInvalid("the payload is empty: SQS requires a body of at least one character and watermill-aws's format has no encoding for an empty payload")
	case !validText(msg.Payload):
		return nil, wmInvalid("the payload is not text SQS accepts (invalid UTF-8 or control characters) and watermill-aws's format sends it unchanged as the body")
	case !validText([]byte(msg.UUID)):
		return nil, wmInvalid("the UUID %q is not text SQS accepts", msg.UUID)
	}
	attrs := make(map[string]types.MessageAttributeValue, min(len(msg.Metadata)+1, MaxAttributes))
	if msg.UUID != "" {
		attrs[WatermillAWSUUIDAttribute] = strAttr(msg.UUID)
	}
	for _, k := range slices.Sorted(maps.Keys(msg.Metadata)) {
		v := msg.Metadata[k]
		switch {
		case v == "" || notSent[k] || k == WatermillAWSUUIDAttribute:
			continue
		case k == AttributeUUID || k == AttributeMetadata || k == AttributeBodyEncoding:
			return nil, wmInvalid("metadata key %q is reserved: a message carrying it is read as Berth's format", k)
		case !validAttrName(k):
			return nil, wmInvalid("metadata key %q is not a valid SQS message attribute name", k)
		case validText([]byte(v)):
			attrs[k] = strAttr(v)
		default:
			attrs[k] = types.MessageAttributeValue{DataType: aws.String(binaryType), BinaryValue: []byte(v)}
		}
	}
	if n := len(attrs); n > MaxAttributes {
		keys := n
		if msg.UUID != "" {
			keys--
		}
		return nil, wmInvalid("%d metadata keys and the UUID need %d message attributes, SQS allows %d and watermill-aws's format sends one per key (BerthCodec packs any number)", keys, n, MaxAttributes)
	}
	return &types.Message{Body: aws.String(string(msg.Payload)), MessageAttributes: attrs}, nil
}

// Unmarshal decodes a message in watermill-aws's format, or in Berth's.
func (WatermillAWSCodec) Unmarshal(m *types.Message) (*message.Message, error) {
	attrs := m.MessageAttributes
	if _, ok := attrs[AttributeUUID]; ok {
		return BerthCodec{}.Unmarshal(m)
	}
	if _, ok := attrs[AttributeMetadata]; ok {
		return BerthCodec{}.Unmarshal(m)
	}
	if _, ok := attrs[AttributeBodyEncoding]; ok {
		return BerthCodec{}.Unmarshal(m)
	}
	meta := make(message.Metadata, len(attrs))
	for k, v := range attrs {
		switch typ := aws.ToString(v.DataType); {
		case isType(typ, stringType), isType(typ, numberType):
			if v.StringValue != nil {
				meta[k] = *v.StringValue
			}
		case isType(typ, binaryType):
			meta[k] = string(v.BinaryValue)
		}
	}
	var id string
	if v, ok := attrs[WatermillAWSUUIDAttribute]; ok {
		id = aws.ToString(v.StringValue)
		if v.StringValue == nil {
			id = string(v.BinaryValue)
		}
		delete(meta, WatermillAWSUUIDAttribute)
	}
	if id == "" {
		id = aws.ToString(m.MessageId)
	}
	msg := message.NewMessage(id, []byte(aws.ToString(m.Body)))
	msg.Metadata = meta
	return msg, nil
}

const (
	numberType = "Number"
	binaryType = "Binary"
)

// isType reports whether the attribute data type typ is base or a custom
// type of it ("String.json").
func isType(typ, base string) bool {
	return typ == base || strings.HasPrefix(typ, base+".")
}

// notSent are the metadata keys WatermillAWSCodec does not send: consumed
// by the publisher, or set afresh on every delivery.
var notSent = map[string]bool{
	MetadataGroupID:             true,
	MetadataDeduplicationID:     true,
	MetadataDelay:               true,
	MetadataSQSMessageID:        true,
	MetadataReceiveCount:        true,
	MetadataSentTimestamp:       true,
	transport.MetadataAttempt:   true,
	transport.MetadataMessageID: true,
}

func wmInvalid(format string, args ...any) error {
	return fmt.Errorf("sqs: watermill-aws codec: %s: %w", fmt.Sprintf(format, args...), transport.ErrInvalidMessage)
}
