package sqs

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/url"
	"testing"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/transport"
)

// FuzzDecode maps arbitrary received messages, as any tool could send
// them: it never panics, and a body without a berth_body attribute is the
// payload unchanged.
func FuzzDecode(f *testing.F) {
	f.Add("hello", "color", "String", "red", []byte(nil), "", "")
	f.Add("AAEC", "n", "Number", "1.5", []byte(nil), `{"a":"b"}`, "base64")
	f.Add("!!", "b", "Binary", "", []byte{0xff}, `{not json`, "base64")
	f.Add("x", "t", "Weird", "v", []byte(nil), `{"a":1}`, "gzip")
	f.Add("x", "s", "String.custom", "v", []byte(nil), `null`, "")
	f.Fuzz(func(t *testing.T, body, name, typ, val string, bin []byte, meta, enc string) {
		attrs := map[string]types.MessageAttributeValue{}
		if name != "" {
			attrs[name] = types.MessageAttributeValue{DataType: aws.String(typ), StringValue: aws.String(val), BinaryValue: bin}
		}
		if meta != "" {
			attrs[AttributeMetadata] = strAttr(meta)
		}
		if enc != "" {
			attrs[AttributeBodyEncoding] = strAttr(enc)
		}
		d, err := decode(body, attrs)
		if err != nil {
			if !errors.Is(err, ErrUndecodable) {
				t.Fatalf("error %v does not wrap ErrUndecodable", err)
			}
			return
		}
		if _, ok := attrs[AttributeBodyEncoding]; !ok && string(d.payload) != body {
			t.Fatalf("payload %q, want the body %q", d.payload, body)
		}
		if d.metadata == nil {
			t.Fatal("nil metadata")
		}
	})
}

// FuzzRoundTrip encodes arbitrary messages and decodes them: what is sent
// is always text SQS accepts within its attribute limits, and the message
// comes back intact (metadata exactly when it is valid UTF-8).
func FuzzRoundTrip(f *testing.F) {
	f.Add("uuid-1", "k", "v", "", "", []byte("payload"))
	f.Add("", "bad..name", "\x00", "AWS.x", "v", []byte{0xff, 0xfe})
	f.Add("u", "k\xff", "v\xfe", berthKey("a"), "", []byte{})
	f.Add("u", AttributeMetadata, "x", MetadataGroupID, "g", []byte("\U0001F600"))
	f.Fuzz(func(t *testing.T, uuid, k1, v1, k2, v2 string, payload []byte) {
		msg := message.NewMessage(uuid, payload)
		for i := range 12 { // more than fit into attributes
			msg.Metadata.Set(berthKey(string(rune('a'+i))), v1)
		}
		msg.Metadata.Set(k1, v1)
		msg.Metadata.Set(k2, v2)
		e, err := encode(msg)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		if len(e.attrs) > MaxAttributes {
			t.Fatalf("%d attributes, SQS allows %d", len(e.attrs), MaxAttributes)
		}
		if !validText([]byte(e.body)) {
			t.Fatalf("body %q is not text SQS accepts", e.body)
		}
		for k, v := range e.attrs {
			if !validAttrName(k) || !validText([]byte(aws.ToString(v.StringValue))) {
				t.Fatalf("attribute %q=%q is not valid for SQS", k, aws.ToString(v.StringValue))
			}
		}
		d, err := decode(e.body, e.attrs)
		if err != nil {
			t.Fatalf("decode of our own encoding: %v", err)
		}
		if d.uuid != uuid || !bytes.Equal(d.payload, payload) {
			t.Fatalf("got %q/%q, want %q/%q", d.uuid, d.payload, uuid, payload)
		}
		want := message.Metadata{}
		valid := true
		for k, v := range msg.Metadata {
			if publishOnly[k] {
				continue
			}
			want[k] = v
			valid = valid && utf8.ValidString(k) && utf8.ValidString(v)
		}
		if valid && !maps.Equal(d.metadata, want) {
			t.Fatalf("metadata %q, want %q", d.metadata, want)
		}
	})
}

func berthKey(s string) string { return "key_" + s }

// FuzzURL opens subscribers and publishers from arbitrary sqs:// URLs: the
// driver never panics, and every error it returns is ErrInvalidConfig.
func FuzzURL(f *testing.F) {
	for _, s := range []string{
		"sqs://127.0.0.1:4566?region=us-east-1", "sqs://?endpoint=http://x:1&create=true",
		"sqs://h:1/path", "sqs://u:p@h:1?fifo=true&content_dedup=1", "sqs://?wait_time=-1s&visibility_timeout=5s",
		"sqs://?bogus=1&concurrency=0", "sqs://h?endpoint=http://y", "sqs://?endpoint=%zz",
		"sqs://?max_receive_count=2000&max_message_size=10", "sqs://?sns=true&consumer_group=g",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "sqs" {
			return
		}
		q := u.Query()
		q.Set("region", "us-east-1") // never reach for the environment's AWS config region
		u.RawQuery = q.Encode()
		d := driver{}
		ctx := context.Background()
		if s, err := d.OpenSubscriber(ctx, u, transport.Options{}); err == nil {
			_ = s.Close()
		} else if !errors.Is(err, transport.ErrInvalidConfig) {
			t.Fatalf("OpenSubscriber(%q): %v is not ErrInvalidConfig", u, err)
		}
		if p, err := d.OpenPublisher(ctx, u, transport.Options{}); err == nil {
			_ = p.Close()
		} else if !errors.Is(err, transport.ErrInvalidConfig) {
			t.Fatalf("OpenPublisher(%q): %v is not ErrInvalidConfig", u, err)
		}
	})
}
