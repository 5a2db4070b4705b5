package sqlqueue

import (
	"encoding/json"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// benchHeaders is a typical headers column: a few short metadata entries.
var benchHeaders = []byte(`{"berth_ordering_key":"customer-1842","name":"order.created","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)

// BenchmarkDecodeHeaders compares the headers scan with json.Unmarshal on
// a typical headers column.
func BenchmarkDecodeHeaders(b *testing.B) {
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeHeaders(benchHeaders); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			md := message.Metadata{}
			if err := json.Unmarshal(benchHeaders, &md); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkOrderingKeyOf reads a claimed row's ordering key from a typical
// headers column, as every claim of a keyed queue does for each row.
func BenchmarkOrderingKeyOf(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if orderingKeyOf(benchHeaders) != "customer-1842" {
			b.Fatal("wrong key")
		}
	}
}
