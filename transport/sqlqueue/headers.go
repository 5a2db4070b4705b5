package sqlqueue

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
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
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	md = message.Metadata{}
	if i < len(b) && b[i] == '}' {
		return md, skipSpace(b, i+1) == len(b)
	}
	for {
		key, next, ok := plainString(b, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		val, next, ok := plainString(b, skipSpace(b, i+1))
		if !ok {
			return nil, false
		}
		md[key] = val
		i = skipSpace(b, next)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return md, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// plainString reads a JSON string at b[i] that needs no unescaping: no
// backslash, no control character, valid UTF-8. It returns the string and
// the index after its closing quote.
func plainString(b []byte, i int) (s string, next int, ok bool) {
	raw, next, ok := plainRaw(b, i)
	if !ok {
		return "", 0, false
	}
	return string(raw), next, true
}

// plainRaw is plainString without the copy: the string's bytes in b.
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
