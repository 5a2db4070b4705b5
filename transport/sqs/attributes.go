package sqs

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Metadata keys the transport reads on publish and sets on receive.
const (
	// MetadataGroupID is read on publish as the FIFO MessageGroupId and set
	// on receive from the message's MessageGroupId. It is not sent as an
	// attribute.
	MetadataGroupID = "berth_sqs_group_id"
	// MetadataDeduplicationID is read on publish as the FIFO
	// MessageDeduplicationId (default: the message UUID) and set on receive.
	// It is not sent as an attribute.
	MetadataDeduplicationID = "berth_sqs_dedup_id"
	// MetadataDelay is read on publish as the per-message delay, a Go
	// duration ("30s") or whole seconds ("30"), at most 15 minutes, rounded
	// up to a second. Standard queues only. It wins over Watermill's delay
	// metadata (components/delay), which is read too. It is not sent as an
	// attribute.
	MetadataDelay = "berth_sqs_delay"

	// MetadataSQSMessageID is set on receive to the SQS message id.
	MetadataSQSMessageID = "berth_sqs_message_id"
	// MetadataReceiveCount is set on receive to ApproximateReceiveCount.
	MetadataReceiveCount = "berth_sqs_receive_count"
	// MetadataSentTimestamp is set on receive to SentTimestamp (Unix
	// milliseconds).
	MetadataSentTimestamp = "berth_sqs_sent_timestamp"
)

// Message attributes the codec reserves.
const (
	// AttributeUUID carries the Watermill message UUID.
	AttributeUUID = "berth_uuid"
	// AttributeMetadata carries, as a JSON object of strings, the metadata
	// that did not fit into separate attributes (SQS allows 10 per message),
	// whose key is not a valid attribute name, or whose value is empty.
	AttributeMetadata = "berth_meta"
	// AttributeBodyEncoding is "base64" when the payload is not text SQS
	// accepts (invalid UTF-8 or characters outside SQS's allowed set) and
	// the body holds its standard base64 encoding.
	AttributeBodyEncoding = "berth_body"
	// AttributeDeadLetter is set on dead-lettered copies: a JSON object with
	// the reason, the source queue, the SQS message id and receive count.
	AttributeDeadLetter = "berth_dead_letter"
)

// MaxAttributes is SQS's limit of message attributes per message.
const MaxAttributes = 10

// ErrUndecodable wraps errors decoding a received message's attributes or
// body; the pipeline dead-letters such deliveries.
var ErrUndecodable = errors.New("sqs: undecodable message")

// ErrDelayUnsupported is returned by Publish for a message whose delay
// (MetadataDelay, or Watermill's components/delay metadata) SQS cannot
// honour: over 15 minutes, on a FIFO queue (which takes no per-message
// delay), or through SNS (which has none). The message is not sent: it is
// never delivered early. The error names the message UUID and the limit.
var ErrDelayUnsupported = errors.New("sqs: delay not supported")

const stringType = "String"

// publishOnly are metadata keys consumed by the publisher, never sent.
var publishOnly = map[string]bool{MetadataGroupID: true, MetadataDeduplicationID: true, MetadataDelay: true}

// encoded is a message ready to send.
type encoded struct {
	body  string
	attrs map[string]types.MessageAttributeValue
	size  int // SQS's size: body + names + types + values
}

// encode turns msg into an SQS body and at most MaxAttributes attributes.
// Metadata keys that are valid attribute names with non-empty, SQS-valid
// values become String attributes, in key order, while they fit; the rest is
// packed into AttributeMetadata as JSON.
func encode(msg *message.Message) (encoded, error) { return encodeReserve(msg, 0) }

// encodeReserve is encode leaving reserve attribute slots free.
func encodeReserve(msg *message.Message, reserve int) (encoded, error) {
	e := encoded{attrs: make(map[string]types.MessageAttributeValue, MaxAttributes)}
	if validText(msg.Payload) {
		e.body = string(msg.Payload)
	} else {
		e.body = base64.StdEncoding.EncodeToString(msg.Payload)
		e.attrs[AttributeBodyEncoding] = strAttr("base64")
	}
	if msg.UUID != "" {
		if validText([]byte(msg.UUID)) {
			e.attrs[AttributeUUID] = strAttr(msg.UUID)
		} else {
			// Not SQS text (invalid UTF-8, control characters): a Binary
			// attribute carries the bytes unchanged.
			e.attrs[AttributeUUID] = types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte(msg.UUID)}
		}
	}

	keys := slices.Sorted(maps.Keys(msg.Metadata))
	var direct, packed []string
	for _, k := range keys {
		if publishOnly[k] {
			continue
		}
		if validAttrName(k) && !reserved(k) && msg.Metadata[k] != "" && validText([]byte(msg.Metadata[k])) {
			direct = append(direct, k)
		} else {
			packed = append(packed, k)
		}
	}
	free := MaxAttributes - reserve - len(e.attrs)
	if len(packed) > 0 || len(direct) > free {
		free-- // one slot for AttributeMetadata
		n := min(len(direct), free)
		packed = append(packed, direct[n:]...)
		direct = direct[:n]
	}
	for _, k := range direct {
		e.attrs[k] = strAttr(msg.Metadata[k])
	}
	if len(packed) > 0 {
		m := make(map[string]string, len(packed))
		for _, k := range packed {
			m[k] = msg.Metadata[k]
		}
		b, err := json.Marshal(m)
		if err != nil {
			return encoded{}, fmt.Errorf("sqs: encode metadata: %w", err)
		}
		// json.Marshal escapes invalid UTF-8 and control characters, so the
		// value is always valid SQS text.
		e.attrs[AttributeMetadata] = strAttr(string(b))
	}
	e.size = messageSize(e.body, e.attrs)
	return e, nil
}

// decoded is what a received message maps to.
type decoded struct {
	uuid     string
	payload  []byte
	metadata message.Metadata
}

// decode reverses encode. Attributes set by other tools become metadata
// (String and Number values as is, Binary values base64-encoded).
func decode(body string, attrs map[string]types.MessageAttributeValue) (decoded, error) {
	d := decoded{metadata: make(message.Metadata, len(attrs)+4)}
	for name, v := range attrs {
		switch name {
		case AttributeUUID:
			if v.BinaryValue != nil {
				d.uuid = string(v.BinaryValue)
			} else {
				d.uuid = aws.ToString(v.StringValue)
			}
		case AttributeMetadata:
			var m map[string]string
			if err := json.Unmarshal([]byte(aws.ToString(v.StringValue)), &m); err != nil {
				return decoded{}, fmt.Errorf("%w: attribute %s: %w", ErrUndecodable, AttributeMetadata, err)
			}
			for k, val := range m {
				d.metadata[k] = val
			}
		case AttributeBodyEncoding:
		default:
			typ := aws.ToString(v.DataType)
			switch {
			case strings.HasPrefix(typ, "String"), strings.HasPrefix(typ, "Number"):
				d.metadata[name] = aws.ToString(v.StringValue)
			case strings.HasPrefix(typ, "Binary"):
				d.metadata[name] = base64.StdEncoding.EncodeToString(v.BinaryValue)
			default:
				return decoded{}, fmt.Errorf("%w: attribute %s: unknown data type %q", ErrUndecodable, name, typ)
			}
		}
	}
	if enc, ok := attrs[AttributeBodyEncoding]; ok {
		switch e := aws.ToString(enc.StringValue); e {
		case "base64":
			p, err := base64.StdEncoding.DecodeString(body)
			if err != nil {
				return decoded{}, fmt.Errorf("%w: base64 body: %w", ErrUndecodable, err)
			}
			d.payload = p
		default:
			return decoded{}, fmt.Errorf("%w: attribute %s: unknown body encoding %q", ErrUndecodable, AttributeBodyEncoding, e)
		}
	} else {
		d.payload = []byte(body)
	}
	return d, nil
}

func strAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String(stringType), StringValue: aws.String(v)}
}

func reserved(k string) bool {
	return k == AttributeUUID || k == AttributeMetadata || k == AttributeBodyEncoding || k == AttributeDeadLetter
}

// validAttrName reports whether SQS accepts k as a message attribute name:
// 1–256 characters of A-Z a-z 0-9 _ - ., no leading or trailing period, no
// "..", and not starting with "AWS." or "Amazon." (any case).
func validAttrName(k string) bool {
	if k == "" || len(k) > 256 || k[0] == '.' || k[len(k)-1] == '.' || strings.Contains(k, "..") {
		return false
	}
	lk := strings.ToLower(k)
	if strings.HasPrefix(lk, "aws.") || strings.HasPrefix(lk, "amazon.") {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// validText reports whether b is UTF-8 made only of the characters SQS
// accepts in bodies and string attributes: #x9 #xA #xD #x20–#xD7FF
// #xE000–#xFFFD #x10000–#x10FFFF.
func validText(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return false
		}
		switch {
		case r == 0x9, r == 0xA, r == 0xD,
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
		b = b[n:]
	}
	return true
}

// messageSize is the size SQS counts against MaximumMessageSize.
func messageSize(body string, attrs map[string]types.MessageAttributeValue) int {
	n := len(body)
	for k, v := range attrs {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}
