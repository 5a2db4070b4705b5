package compat

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqs"
)

// watermill-aws's own marshaler fits the seam unchanged.
var _ sqs.Codec = wmsqs.DefaultMarshalerUnmarshaler{}

// TestWatermillAWSCodecMatchesLibrary: for what watermill-aws v1.0.x can
// send, WatermillAWSCodec writes exactly its body and attributes, and each
// reads what the other wrote.
func TestWatermillAWSCodecMatchesLibrary(t *testing.T) {
	lib := wmsqs.DefaultMarshalerUnmarshaler{}
	var ours sqs.WatermillAWSCodec
	for _, msg := range []*message.Message{
		newMsg("uuid-1", []byte("hello")),
		newMsg("uuid-2", []byte(`{"a":[1,2]}`), "correlation_id", "c-1", "name", "Zoë ✓ 日本語"),
		newMsg("uuid-3", []byte("x"), manyKeys(9)...),
		newMsg("uuid-4", []byte("tabs\tand\nnewlines\r"), "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
	} {
		t.Run(msg.UUID, func(t *testing.T) {
			theirs, err := lib.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			mine, err := ours.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			if aws.ToString(mine.Body) != aws.ToString(theirs.Body) {
				t.Errorf("body %q, watermill-aws %q", aws.ToString(mine.Body), aws.ToString(theirs.Body))
			}
			if !maps.EqualFunc(mine.MessageAttributes, theirs.MessageAttributes, sameAttr) {
				t.Errorf("attributes %s, watermill-aws %s", fmtAttrs(mine.MessageAttributes), fmtAttrs(theirs.MessageAttributes))
			}
			for name, pair := range map[string][2]sqs.Codec{
				"watermill-aws reads ours": {ours, lib},
				"ours reads watermill-aws": {lib, ours},
			} {
				m, err := pair[0].Marshal(msg)
				if err != nil {
					t.Fatal(err)
				}
				got, err := pair[1].Unmarshal(received(m, "sqs-id"))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if got.UUID != msg.UUID || !bytes.Equal(got.Payload, msg.Payload) || !maps.Equal(got.Metadata, msg.Metadata) {
					t.Errorf("%s: got %q %q %q, want %q %q %q", name, got.UUID, got.Payload, got.Metadata, msg.UUID, msg.Payload, msg.Metadata)
				}
			}
		})
	}
}

func sameAttr(a, b types.MessageAttributeValue) bool {
	return aws.ToString(a.DataType) == aws.ToString(b.DataType) &&
		aws.ToString(a.StringValue) == aws.ToString(b.StringValue) && bytes.Equal(a.BinaryValue, b.BinaryValue)
}

func fmtAttrs(attrs map[string]types.MessageAttributeValue) string {
	var b strings.Builder
	for k, v := range attrs {
		fmt.Fprintf(&b, "%s:%s=%q/%x ", k, aws.ToString(v.DataType), aws.ToString(v.StringValue), v.BinaryValue)
	}
	return b.String()
}

// TestWatermillAWSCodecBinaryAttributes: a value SQS does not accept as
// text travels as a Binary attribute, which watermill-aws reads back as the
// same bytes. (The rest of the codec's limits: transport/sqs's
// TestWatermillAWSCodecLimits.)
func TestWatermillAWSCodecBinaryAttributes(t *testing.T) {
	var c sqs.WatermillAWSCodec
	msg := newMsg("u", []byte("x"), "ctrl", "\x00\x01", "utf8", "\xff")
	m, err := c.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if typ := aws.ToString(m.MessageAttributes["ctrl"].DataType); typ != "Binary" {
		t.Errorf("ctrl sent as %s, want Binary", typ)
	}
	got, err := wmsqs.DefaultMarshalerUnmarshaler{}.Unmarshal(received(m, "id"))
	if err != nil || !maps.Equal(got.Metadata, msg.Metadata) {
		t.Errorf("watermill-aws read %q (%v), want %q", got.Metadata, err, msg.Metadata)
	}
}

// FuzzWatermillAWSReadsCodec: for any message WatermillAWSCodec sends,
// watermill-aws reads back the UUID, payload and metadata that
// WatermillAWSCodec itself reads (which transport/sqs's
// FuzzWatermillAWSCodec checks against the message sent).
func FuzzWatermillAWSReadsCodec(f *testing.F) {
	f.Add("uuid", "k", "v", "k2", "v2", []byte("payload"), 3)
	f.Add("", "bad key", "\x00", "AWS.x", "", []byte{0xff}, 12)
	f.Add("ü", "ü", "\xff", sqs.MetadataDelay, "1s", []byte{}, 0)
	f.Add("u", sqs.WatermillAWSUUIDAttribute, "x", sqs.AttributeUUID, "y", []byte("\U0010FFFF"), 9)
	f.Fuzz(func(t *testing.T, uuid, k1, v1, k2, v2 string, payload []byte, keys int) {
		msg := newMsg(uuid, payload, append(manyKeys(keys%16), k1, v1, k2, v2)...)
		m, err := sqs.WatermillAWSCodec{}.Marshal(msg)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidMessage) {
				t.Fatalf("Marshal: %v is not ErrInvalidMessage", err)
			}
			return
		}
		want, err := sqs.WatermillAWSCodec{}.Unmarshal(received(m, "sqs-id"))
		if err != nil {
			t.Fatalf("WatermillAWSCodec: %v", err)
		}
		got, err := wmsqs.DefaultMarshalerUnmarshaler{}.Unmarshal(received(m, "sqs-id"))
		if err != nil {
			t.Fatalf("watermill-aws: %v", err)
		}
		if got.UUID != want.UUID || !bytes.Equal(got.Payload, want.Payload) || !maps.Equal(got.Metadata, want.Metadata) {
			t.Fatalf("watermill-aws read %q %q %q, WatermillAWSCodec %q %q %q", got.UUID, got.Payload, got.Metadata, want.UUID, want.Payload, want.Metadata)
		}
	})
}
