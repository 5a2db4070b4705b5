package sqlqueue

import (
	"bytes"
	"encoding/json"
	"maps"
	"testing"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/delaymeta"
	"github.com/berth-go/berth/transport"
)

// FuzzMapRow feeds arbitrary rows (uuid, headers column, body column) to
// the row mapping: it never panics, a mapped message carries the row's
// uuid and body unchanged, and a headers column that is a JSON object of
// strings always maps.
func FuzzMapRow(f *testing.F) {
	f.Add("id-1", []byte(`{"a":"b"}`), []byte("body"))
	f.Add("", []byte(``), []byte{})
	f.Add("x", []byte(`null`), []byte{0xff, 0})
	f.Add("x", []byte(`{"a":1}`), []byte("x"))
	f.Add("x", []byte(`[1,2]`), []byte("x"))
	f.Add("x", []byte(`{"k":"\ud800"}`), []byte("x"))
	f.Add("x", []byte(`{"a":"1","a":"2"}`), []byte("x"))
	f.Add("x", []byte{0xff, 0xfe, '{'}, []byte("x"))
	f.Add("x", []byte(`{"a":{"b":"c"}}`), []byte("x"))
	s := &Source{}
	f.Fuzz(func(t *testing.T, uuid string, headers, body []byte) {
		d := &transport.Delivery{ID: "1", Raw: &rawRow{uuid: uuid, headers: headers, body: body}}
		msg, err := s.Map(d)
		var obj map[string]string
		isObj := len(headers) == 0 || json.Unmarshal(headers, &obj) == nil
		if err != nil {
			if isObj {
				t.Fatalf("headers %q decode as an object of strings, but Map failed: %v", headers, err)
			}
			return
		}
		if msg.UUID != uuid || !bytes.Equal(msg.Payload, body) {
			t.Fatalf("mapped %q/%q, want %q/%q", msg.UUID, msg.Payload, uuid, body)
		}
		// Headers "null" leave Metadata nil; the pipeline sets an empty map
		// before user code sees the message.
		if obj != nil && !maps.Equal(map[string]string(msg.Metadata), obj) {
			t.Fatalf("metadata %v, want %v", msg.Metadata, obj)
		}
	})
}

// FuzzHeadersRoundTrip publishes metadata through the publisher's encoder
// and maps it back: valid UTF-8 metadata comes back exactly; any other
// input still maps (invalid UTF-8 comes back with U+FFFD) and never panics.
func FuzzHeadersRoundTrip(f *testing.F) {
	f.Add("k", "v", "k2", "v2", []byte("p"))
	f.Add("", "", "a", "", []byte{})
	f.Add("bad\xff", "val\xfe", "ok", "✓", []byte{0})
	f.Add("\u2028", "<>&", "\x00", "\"", []byte("x"))
	p := &Publisher{cfg: PublisherConfig{MaxMessageSize: 1 << 30}}
	s := &Source{}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, payload []byte) {
		msg := message.NewMessage("u", payload)
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}} {
			if kv[0] == MetadataDelay || kv[0] == MetadataDeliverAt {
				continue // read by the publisher, not stored
			}
			if kv[0] == delaymeta.WatermillFor || kv[0] == delaymeta.WatermillUntil {
				continue // read by the publisher, which refuses a malformed value
			}
			msg.Metadata.Set(kv[0], kv[1])
		}
		rows, err := p.rows([]*message.Message{msg})
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		got, err := s.Map(&transport.Delivery{ID: "1", Raw: &rawRow{uuid: rows[0].UUID, headers: rows[0].Headers, body: rows[0].Body}})
		if err != nil {
			t.Fatalf("headers %q written by the publisher do not map: %v", rows[0].Headers, err)
		}
		if !bytes.Equal(got.Payload, payload) {
			t.Fatalf("payload %q, want %q", got.Payload, payload)
		}
		valid := true
		for k, v := range msg.Metadata {
			valid = valid && utf8.ValidString(k) && utf8.ValidString(v)
		}
		if valid && !maps.Equal(got.Metadata, msg.Metadata) {
			t.Fatalf("metadata %q, want %q", got.Metadata, msg.Metadata)
		}
		if !valid && len(got.Metadata) > len(msg.Metadata) {
			t.Fatalf("metadata grew: %q from %q", got.Metadata, msg.Metadata)
		}
	})
}

// FuzzDecodeHeaders checks the headers scan against json.Unmarshal: the
// same metadata when it decodes, an error exactly when json.Unmarshal
// fails.
func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range []string{
		`{"a":"b"}`, `{}`, ` { } `, `{"a":"b","c":"d"}`, "{\n\t\"a\" : \"b\" ,\r\"c\":\"\"}",
		`{"a":"b",}`, `{"a":"b"} x`, `{"a":"b"`, `{"a"}`, `{"a":}`, `{,}`, `{"a":"b""c":"d"}`,
		`{"a":"\u00e9"}`, `{"é":"ü"}`, "{\"a\":\"\xff\"}", "{\"a\":\"\x01\"}", `{"a":"b\"c"}`,
		`{"a":null}`, `{"a":1}`, `null`, `[]`, `"a"`, ``, `{"a":"1","a":"2"}`, `{"a":{"b":"c"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeHeaders(b)
		want := message.Metadata{}
		wantErr := json.Unmarshal(b, &want)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, json.Unmarshal's %v", b, err, wantErr)
		}
		if err == nil && !maps.Equal(got, want) {
			t.Fatalf("%q: decoded %v, json.Unmarshal %v", b, got, want)
		}
	})
}

// FuzzOrderingKeyOf checks the ordering key read in place against a decode
// of the whole headers column: the same key, or "" where the decode fails
// or hasOrderingKey's filter (the member as an encoder writes it) does not
// pass.
func FuzzOrderingKeyOf(f *testing.F) {
	k := transport.MetadataOrderingKey
	for _, s := range []string{
		`{"` + k + `":"a"}`, `{"x":"y","` + k + `":"a","z":""}`, `{"` + k + `":"a","` + k + `":"b"}`,
		`{"` + k + `":"a\"b"}`, `{"` + k + `":"\u00e9"}`, "{\"" + k + "\":\"\xff\"}", `{"` + k + `":null}`,
		`{"` + k + `":1}`, `{"` + k + `":"a"} x`, `{"` + k + `":"a",}`, `{"\u0062erth_ordering_key":"a"}`,
		`{"x":"\"` + k + `\":\"a\""}`, `{"` + k + `":"a","x":"\n"}`, `{"` + k + `" : "a" }`, `{"` + k + `":{"a":"b"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var md map[string]string
		want := ""
		if hasOrderingKey(b) && json.Unmarshal(b, &md) == nil {
			want = md[k]
		}
		if got := orderingKeyOf(b); got != want {
			t.Fatalf("%q: ordering key %q, a decode's %q", b, got, want)
		}
	})
}
