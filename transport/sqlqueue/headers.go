package sqlqueue

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// decodeHeaders decodes a row's headers column, a JSON object of strings,
// into message metadata.
//
// encoding/json decodes through reflection, and in the drain that was a
// sixth of the subscriber's CPU per message (profiled: 10.5 µs of Map's
// 12 µs). Headers written by a Publisher are a flat object of plain
// strings, so a scan handles that shape directly: it accepts only what
// json.Unmarshal accepts and decodes the same way (keys and values
// without escapes, valid UTF-8, no control characters), and hands
// anything else — escapes, null, numbers, invalid UTF-8, trailing bytes,
// a malformed object — to json.Unmarshal, so the result and the error are
// json.Unmarshal's. FuzzDecodeHeaders checks that they agree.
func decodeHeaders(b []byte) (message.Metadata, error) {
	if md, ok := scanHeaders(b); ok {
		return md, nil
	}
	md := message.Metadata{}
	if err := json.Unmarshal(b, &md); err != nil {
		return nil, err
	}
	return md, nil
}

// scanHeaders decodes b when it is a flat JSON object of plain strings; ok
// is false for anything else.
func scanHeaders(b []byte) (md message.Metadata, ok bool) {
	md = message.Metadata{}
	if !plainMembers(b, func(k, v []byte) { md[string(k)] = string(v) }) {
		return nil, false
	}
	return md, true
}

// scanOrderingKey reads b as scanHeaders does (a flat JSON object of
// plain strings, ok false for anything else) and returns the value of its
// last ordering-key member, which is the one a decode keeps, without
// copying any other member.
func scanOrderingKey(b []byte) (key string, ok bool) {
	ok = plainMembers(b, func(k, v []byte) {
		if string(k) == transport.MetadataOrderingKey {
			key = string(v)
		}
	})
	return key, ok
}

// plainMembers calls f with the key and value (in b) of each member of b,
// in order, and reports whether b is a flat JSON object of plain strings
// (plainRaw) with nothing after it but whitespace. When it is not, f may
// have seen the members before the fault.
func plainMembers(b []byte, f func(k, v []byte)) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		k, next, ok := plainRaw(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		v, next, ok := plainRaw(b, skipSpace(b, i+1))
		if !ok {
			return false
		}
		f(k, v)
		i = skipSpace(b, next)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// plainRaw reads a JSON string at b[i] that needs no unescaping: no
// backslash, no control character, valid UTF-8. It returns the string's
// bytes in b and the index after its closing quote.
func plainRaw(b []byte, i int) (raw []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	start := i + 1
	ascii := true
	for j := start; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			raw := b[start:j]
			if !ascii && !utf8.Valid(raw) {
				return nil, 0, false
			}
			return raw, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, 0, false
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
