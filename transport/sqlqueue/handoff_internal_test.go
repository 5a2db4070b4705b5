package sqlqueue

import (
	"slices"
	"testing"

	"github.com/berth-go/berth/transport"
)

// A freed key keeps the highest settled head's id as its bound, and take
// returns the keys sorted with their bounds beside them.
func TestFreedKeysKeepTheirBounds(t *testing.T) {
	var f freedKeys
	f.add(false, []string{"b", "a"}, []int64{20, 10})
	f.add(true, []string{"b"}, []int64{15}) // an older head's id: no tighter
	f.add(false, []string{"a"}, []int64{30})
	keys, from, again := f.take()
	if !slices.Equal(keys, []string{"a", "b"}) || !slices.Equal(from, []int64{30, 20}) || !again["b"] || again["a"] {
		t.Fatalf("take = %v, %v, %v; want [a b], [30 20], b again", keys, from, again)
	}
	if keys, from, _ := f.take(); keys != nil || from != nil {
		t.Fatalf("second take = %v, %v; want nothing", keys, from)
	}
}

// A riding ack's key joins the hand-off with its row's id as the bound:
// a new key in key order, a key already there with the higher of the two.
func TestRiderKeysCarryTheirRows(t *testing.T) {
	ride := func(key string, id int64) *ridingAck {
		return &ridingAck{d: &transport.Delivery{Handle: &handle{ref: Ref{ID: id, Owner: 1}, key: key}}}
	}
	keys, from := withRiderKeys([]string{"b", "d"}, []int64{5, 7}, []*ridingAck{ride("c", 9), ride("d", 8), ride("", 3), ride("a", 1)})
	if !slices.Equal(keys, []string{"a", "b", "c", "d"}) || !slices.Equal(from, []int64{1, 5, 9, 8}) {
		t.Fatalf("withRiderKeys = %v, %v; want [a b c d], [1 5 9 8]", keys, from)
	}
}
