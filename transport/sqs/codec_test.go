package sqs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/transport"
)

// The tests against the real watermill-aws (its marshaler, its publishers
// and subscribers on the emulator) live in internal/compat, a module of its
// own, so that the library's go.mod does not require it.

// sqsAccepts reports why SQS (not just the emulator, which is lax about
// attributes) would reject a message with this body and these attributes.
func sqsAccepts(m *types.Message) error {
	body := aws.ToString(m.Body)
	if body == "" {
		return errors.New("empty body")
	}
	if !validText([]byte(body)) {
		return fmt.Errorf("body %q is not SQS text", body)
	}
	if n := len(m.MessageAttributes); n > MaxAttributes {
		return fmt.Errorf("%d attributes", n)
	}
	for k, v := range m.MessageAttributes {
		if !validAttrName(k) {
			return fmt.Errorf("attribute name %q", k)
		}
		switch aws.ToString(v.DataType) {
		case stringType, numberType:
			if s := aws.ToString(v.StringValue); s == "" || !validText([]byte(s)) {
				return fmt.Errorf("attribute %s value %q", k, s)
			}
		case binaryType:
			if len(v.BinaryValue) == 0 {
				return fmt.Errorf("attribute %s: empty binary value", k)
			}
		default:
			return fmt.Errorf("attribute %s: data type %q", k, aws.ToString(v.DataType))
		}
	}
	return nil
}

// received is what a queue hands a consumer for m.
func received(m *types.Message, id string) *types.Message {
	return &types.Message{MessageId: aws.String(id), Body: m.Body, MessageAttributes: m.MessageAttributes}
}

// sentMetadata is msg's metadata as a receiver should see it: without the
// keys the codec does not send and, for watermill-aws's format, without
// empty values.
func sentMetadata(c Codec, msg *message.Message) message.Metadata {
	want := message.Metadata{}
	for k, v := range msg.Metadata {
		switch c.(type) {
		case WatermillAWSCodec:
			if notSent[k] || v == "" || k == WatermillAWSUUIDAttribute {
				continue
			}
		default:
			if publishOnly[k] {
				continue
			}
		}
		want[k] = v
	}
	return want
}

func newMsg(uuid string, payload []byte, kv ...string) *message.Message {
	m := message.NewMessage(uuid, payload)
	for i := 0; i+1 < len(kv); i += 2 {
		m.Metadata.Set(kv[i], kv[i+1])
	}
	return m
}

func manyKeys(n int) []string {
	var kv []string
	for i := range n {
		kv = append(kv, fmt.Sprintf("key_%02d", i), fmt.Sprintf("value %d", i))
	}
	return kv
}

// TestCodecsRoundTrip: each codec's Marshal is a message SQS accepts, and
// its Unmarshal gives back the UUID, payload and metadata.
func TestCodecsRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		msg  *message.Message
		wmOK bool // watermill-aws's format can carry it
	}{
		{"plain", newMsg("0b9c5f0e-uuid", []byte(`{"order":1}`), "color", "red"), true},
		{"unicode metadata", newMsg("u-1", []byte("żółw 🐢"), "name", "Zoë ✓ 日本語", "emoji", "🚀\U0010FFFD"), true},
		{"control characters in metadata", newMsg("u-2", []byte("x"), "ctrl", "a\x00b\x1f", "del", "\x7f"), true},
		{"nine metadata keys", newMsg("u-3", []byte("x"), manyKeys(9)...), true},
		{"many metadata keys", newMsg("u-4", []byte("x"), manyKeys(40)...), false},
		{"empty value", newMsg("u-5", []byte("x"), "empty", "", "full", "v"), true},
		{"no UUID", newMsg("", []byte("x"), "k", "v"), true},
		{"transport keys", newMsg("u-6", []byte("x"), MetadataDelay, "1s", MetadataSQSMessageID, "old", transport.MetadataAttempt, "3", "k", "v"), true},
		{"one character", newMsg("u-7", []byte("\n")), true},
		{"binary payload", newMsg("u-8", []byte{0, 1, 0xff, 0xfe}), false},
		{"invalid key", newMsg("u-9", []byte("x"), "a key", "v"), false},
		{"empty payload", newMsg("u-10", nil), false},
	}
	for _, c := range []Codec{BerthCodec{}, WatermillAWSCodec{}} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%T/%s", c, tc.name), func(t *testing.T) {
				m, err := c.Marshal(tc.msg)
				if _, wm := c.(WatermillAWSCodec); wm && !tc.wmOK {
					if !errors.Is(err, transport.ErrInvalidMessage) {
						t.Fatalf("Marshal: %v, want ErrInvalidMessage", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				// Berth's format sends an empty payload as an empty body,
				// which SQS documents as invalid (fauxqs's SendMessageBatch
				// takes it); the round trip is still checked.
				if err := sqsAccepts(m); err != nil && len(tc.msg.Payload) > 0 {
					t.Fatalf("SQS would reject it: %v", err)
				}
				got, err := c.Unmarshal(received(m, "sqs-id"))
				if err != nil {
					t.Fatal(err)
				}
				wantID := tc.msg.UUID
				if wantID == "" {
					wantID = "sqs-id"
				}
				if got.UUID != wantID || !bytes.Equal(got.Payload, tc.msg.Payload) {
					t.Errorf("got %q %q, want %q %q", got.UUID, got.Payload, wantID, tc.msg.Payload)
				}
				if want := sentMetadata(c, tc.msg); !maps.Equal(got.Metadata, want) {
					t.Errorf("metadata %q, want %q", got.Metadata, want)
				}
			})
		}
	}
}

func fmtAttrs(attrs map[string]types.MessageAttributeValue) string {
	var b strings.Builder
	for k, v := range attrs {
		fmt.Fprintf(&b, "%s:%s=%q/%x ", k, aws.ToString(v.DataType), aws.ToString(v.StringValue), v.BinaryValue)
	}
	return b.String()
}

// TestWatermillAWSCodecLimits: what watermill-aws's format cannot carry is
// ErrInvalidMessage before anything is sent, naming the problem; what it
// can carry in a form SQS accepts is sent that way.
func TestWatermillAWSCodecLimits(t *testing.T) {
	var c WatermillAWSCodec
	for _, tc := range []struct {
		name string
		msg  *message.Message
		says string // in the error; "" means no error
	}{
		{"UUID and 9 keys fill the 10 attributes", newMsg("u", []byte("x"), manyKeys(9)...), ""},
		{"10 keys", newMsg("u", []byte("x"), manyKeys(10)...), "10 metadata keys and the UUID need 11 message attributes"},
		{"10 keys without a UUID", newMsg("", []byte("x"), manyKeys(10)...), ""},
		{"keys Berth sets on delivery do not count", newMsg("u", []byte("x"), append(manyKeys(9),
			MetadataSQSMessageID, "m", MetadataReceiveCount, "1", MetadataSentTimestamp, "1", MetadataGroupID, "g",
			MetadataDeduplicationID, "d", MetadataDelay, "1s", transport.MetadataAttempt, "1", transport.MetadataMessageID, "m")...), ""},
		{"empty values do not count", newMsg("u", []byte("x"), append(manyKeys(9), "e1", "", "e2", "")...), ""},
		{"the UUID attribute as a key gives way", newMsg("u", []byte("x"), WatermillAWSUUIDAttribute, "other"), ""},
		{"invalid key", newMsg("u", []byte("x"), "héllo", "v"), `metadata key "héllo" is not a valid SQS message attribute name`},
		{"AWS. prefix", newMsg("u", []byte("x"), "AWS.trace", "v"), `"AWS.trace" is not a valid`},
		{"Berth's reserved key", newMsg("u", []byte("x"), AttributeMetadata, "{}"), `metadata key "berth_meta" is reserved`},
		{"empty payload", newMsg("u", []byte{}), "the payload is empty"},
		{"binary payload", newMsg("u", []byte{0xff}), "the payload is not text SQS accepts"},
		{"control character payload", newMsg("u", []byte("a\x00")), "the payload is not text SQS accepts"},
		{"UUID not text", newMsg("u\x00", []byte("x")), "the UUID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := c.Marshal(tc.msg)
			if tc.says == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := sqsAccepts(m); err != nil {
					t.Fatalf("SQS would reject it: %v", err)
				}
				return
			}
			if !errors.Is(err, transport.ErrInvalidMessage) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want ErrInvalidMessage saying %q", err, tc.says)
			}
		})
	}

	// A value SQS does not accept as text travels as a Binary attribute,
	// which watermill-aws reads back as the same bytes.
	msg := newMsg("u", []byte("x"), "ctrl", "\x00\x01", "utf8", "\xff")
	m, err := c.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if typ := aws.ToString(m.MessageAttributes["ctrl"].DataType); typ != binaryType {
		t.Errorf("ctrl sent as %s, want Binary", typ)
	}
	got, err := c.Unmarshal(received(m, "id"))
	if err != nil || !maps.Equal(got.Metadata, msg.Metadata) {
		t.Errorf("WatermillAWSCodec read %q (%v), want %q", got.Metadata, err, msg.Metadata)
	}
	// That watermill-aws reads them back the same:
	// internal/compat's TestWatermillAWSCodecBinaryAttributes.
}

// TestWatermillAWSCodecReadsBothFormats: a queue may hold messages in
// Berth's format (a publisher not yet switched) and in watermill-aws's;
// WatermillAWSCodec reads both, and other tools' attributes of every type.
func TestWatermillAWSCodecReadsBothFormats(t *testing.T) {
	var c WatermillAWSCodec
	berth := newMsg("berth-uuid", []byte{0, 0xff}, manyKeys(20)...)
	m, err := BerthCodec{}.Marshal(berth)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Unmarshal(received(m, "id"))
	if err != nil {
		t.Fatal(err)
	}
	if got.UUID != berth.UUID || !bytes.Equal(got.Payload, berth.Payload) || !maps.Equal(got.Metadata, berth.Metadata) {
		t.Errorf("Berth's format: got %q %q %q", got.UUID, got.Payload, got.Metadata)
	}

	foreign := &types.Message{MessageId: aws.String("sqs-id"), Body: aws.String("b"), MessageAttributes: map[string]types.MessageAttributeValue{
		"n":      {DataType: aws.String("Number"), StringValue: aws.String("1.5")},
		"custom": {DataType: aws.String("String.json"), StringValue: aws.String(`{"a":1}`)},
		"bin":    {DataType: aws.String("Binary.gz"), BinaryValue: []byte{1, 2}},
		"odd":    {DataType: aws.String("Weird"), StringValue: aws.String("skipped")},
	}}
	got, err = c.Unmarshal(foreign)
	if err != nil {
		t.Fatal(err)
	}
	want := message.Metadata{"n": "1.5", "custom": `{"a":1}`, "bin": "\x01\x02"}
	if got.UUID != "sqs-id" || string(got.Payload) != "b" || !maps.Equal(got.Metadata, want) {
		t.Errorf("foreign message: got %q %q %q, want sqs-id b %q", got.UUID, got.Payload, got.Metadata, want)
	}
}

// FuzzWatermillAWSCodec: for any message, Marshal either refuses it with
// ErrInvalidMessage or sends what SQS accepts, and then WatermillAWSCodec
// reads back the UUID, payload and metadata (without empty values and the
// keys it does not send). That watermill-aws reads back the same:
// internal/compat's FuzzWatermillAWSReadsCodec.
func FuzzWatermillAWSCodec(f *testing.F) {
	f.Add("uuid", "k", "v", "k2", "v2", []byte("payload"), 3)
	f.Add("", "bad key", "\x00", "AWS.x", "", []byte{0xff}, 12)
	f.Add("ü", "ü", "\xff", MetadataDelay, "1s", []byte{}, 0)
	f.Add("u", WatermillAWSUUIDAttribute, "x", AttributeUUID, "y", []byte("\U0010FFFF"), 9)
	f.Fuzz(func(t *testing.T, uuid, k1, v1, k2, v2 string, payload []byte, keys int) {
		msg := newMsg(uuid, payload, append(manyKeys(keys%16), k1, v1, k2, v2)...)
		m, err := WatermillAWSCodec{}.Marshal(msg)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidMessage) {
				t.Fatalf("Marshal: %v is not ErrInvalidMessage", err)
			}
			return
		}
		if err := sqsAccepts(m); err != nil {
			t.Fatalf("SQS would reject it: %v", err)
		}
		wantID := uuid
		if wantID == "" {
			wantID = "sqs-id"
		}
		want := sentMetadata(WatermillAWSCodec{}, msg)
		for name, c := range map[string]Codec{"WatermillAWSCodec": WatermillAWSCodec{}} {
			got, err := c.Unmarshal(received(m, "sqs-id"))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got.UUID != wantID || !bytes.Equal(got.Payload, payload) || !maps.Equal(got.Metadata, want) {
				t.Fatalf("%s read %q %q %q, want %q %q %q", name, got.UUID, got.Payload, got.Metadata, wantID, payload, want)
			}
		}
	})
}

// TestDeadLetterCopy: a dead-letter copy leaves a slot for
// berth_dead_letter; watermill-aws's format drops (and names) what does not
// fit, keeping the UUID; a message the codec cannot encode goes in Berth's
// format.
func TestDeadLetterCopy(t *testing.T) {
	full := newMsg("u", []byte("x"), manyKeys(9)...)
	body, attrs, notes, err := deadLetterCopy(WatermillAWSCodec{}, full)
	if err != nil {
		t.Fatal(err)
	}
	if body != "x" || len(attrs) != MaxAttributes-1 || aws.ToString(attrs[WatermillAWSUUIDAttribute].StringValue) != "u" {
		t.Errorf("body %q, attributes %s", body, fmtAttrs(attrs))
	}
	if d, _ := notes["dropped_attributes"].([]string); len(d) != 1 || d[0] != "key_08" {
		t.Errorf("notes %v, want key_08 dropped", notes)
	}

	_, attrs, _, err = deadLetterCopy(BerthCodec{}, newMsg("u", []byte("x"), manyKeys(30)...))
	if err != nil || len(attrs) != MaxAttributes-1 {
		t.Errorf("Berth's format: %d attributes, %v", len(attrs), err)
	}

	binary := newMsg("u", []byte{0xff}, "k", "v")
	body, attrs, notes, err = deadLetterCopy(WatermillAWSCodec{}, binary)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := notes["codec_error"]; !ok {
		t.Errorf("notes %v, want codec_error", notes)
	}
	got, err := WatermillAWSCodec{}.Unmarshal(&types.Message{Body: aws.String(body), MessageAttributes: attrs})
	if err != nil || got.UUID != "u" || !bytes.Equal(got.Payload, binary.Payload) {
		t.Errorf("fallback copy read as %v, %v", got, err)
	}
}

// TestCodecURLParameter: codec=berth|watermill-aws selects the codec; any
// other value is ErrInvalidConfig naming the parameter.
func TestCodecURLParameter(t *testing.T) {
	ctx := context.Background()
	for value, want := range map[string]Codec{"": BerthCodec{}, "berth": BerthCodec{}, "watermill-aws": WatermillAWSCodec{}} {
		u := "sqs://127.0.0.1:1?region=us-east-1"
		if value != "" {
			u += "&codec=" + value
		}
		p, err := transport.OpenPublisher(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.(*Publisher).cfg.Codec; got != want {
			t.Errorf("%s: codec %T, want %T", u, got, want)
		}
		_ = p.Close()
		s, err := transport.OpenSubscriber(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
	}
	for _, u := range []string{"sqs://127.0.0.1:1?codec=json", "sqs://127.0.0.1:1?codec=Watermill-AWS"} {
		_, perr := transport.OpenPublisher(ctx, u)
		_, serr := transport.OpenSubscriber(ctx, u)
		for _, err := range []error{perr, serr} {
			if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), `"codec"`) {
				t.Errorf("%s: %v, want ErrInvalidConfig naming codec", u, err)
			}
		}
	}
}
