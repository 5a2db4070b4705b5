package sqlqueue

import (
	"encoding/json"

	"github.com/berth-go/berth/transport"
)

// orderingKeyOf returns the ordering key in a row's headers (a JSON object
// of metadata), or "" when it has none or the headers are not such an
// object (Map reports those).
//
// Every claimed row of a keyed queue needs its key (for the hand-off),
// long before Map decodes the headers. A decode into a map for it cost
// about 2.5 µs and a map per row. scanOrderingKey reads the object in
// place, as scanHeaders does, and hands what it does not read exactly to
// json.Unmarshal, so the result is the decode's whenever hasOrderingKey's
// filter passes (FuzzOrderingKeyOf).
func orderingKeyOf(headers []byte) string {
	if !hasOrderingKey(headers) {
		return ""
	}
	if key, ok := scanOrderingKey(headers); ok {
		return key
	}
	var md map[string]string
	if json.Unmarshal(headers, &md) != nil {
		return ""
	}
	return md[transport.MetadataOrderingKey]
}

// scanOrderingKey reads b as scanHeaders does (a flat JSON object of
// plain strings, ok false for anything else) and returns the value of its
// last ordering-key member, which is the one a decode keeps, without
// copying any other member.
func scanOrderingKey(b []byte) (key string, ok bool) {
	o := plainObject{b: b}
	for {
		k, v, more := o.next()
		if !more {
			return key, o.ok
		}
		if string(k) == transport.MetadataOrderingKey {
			key = string(v)
		}
	}
}
