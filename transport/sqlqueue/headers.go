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
	md = message.Metadata{}
	o := plainObject{b: b}
	for {
		k, v, more := o.next()
		if !more {
			if !o.ok {
				return nil, false
			}
			return md, true
		}
		md[string(k)] = string(v)
	}
}

// A plainObject walks b as a flat JSON object of plain strings
// (plainRaw): next returns its members one by one, and after the last, ok
// tells whether b was such an object, nothing after it but whitespace.
type plainObject struct {
	b  []byte
	i  int // where the next member starts (after the opening brace once in)
	in bool
	// ok, once next returned more false: b is a well-formed object of
	// plain strings.
	ok   bool
	done bool
}

// next returns the next member's key and value, in b; more is false at
// the end of the object or at the first thing that is not plain.
func (o *plainObject) next() (k, v []byte, more bool) {
	if o.done {
		return nil, nil, false
	}
	b := o.b
	if !o.in {
		o.in = true
		i := skipSpace(b, 0)
		if i >= len(b) || b[i] != '{' {
			return o.end(false)
		}
		if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
			return o.end(skipSpace(b, i+1) == len(b))
		}
		o.i = i
	}
	k, next, ok := plainRaw(b, o.i)
	if !ok {
		return o.end(false)
	}
	i := skipSpace(b, next)
	if i >= len(b) || b[i] != ':' {
		return o.end(false)
	}
	v, next, ok = plainRaw(b, skipSpace(b, i+1))
	if !ok {
		return o.end(false)
	}
	i = skipSpace(b, next)
	switch {
	case i < len(b) && b[i] == ',':
		o.i = skipSpace(b, i+1)
	case i < len(b) && b[i] == '}':
		// The last member: the next call ends the walk.
		o.done, o.ok = true, skipSpace(b, i+1) == len(b)
	default:
		return o.end(false)
	}
	return k, v, true
}

// end ends the walk, with ok as its verdict.
func (o *plainObject) end(ok bool) (k, v []byte, more bool) {
	o.done, o.ok = true, ok
	return nil, nil, false
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
