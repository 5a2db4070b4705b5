package sqlserver

import (
	"bytes"
	"fmt"
	"testing"
	"unicode/utf16"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/berth-go/berth/transport/sqlqueue"
)

// BenchmarkInsertEncoding measures, on the client, what Insert's form
// costs per body byte for bodies of 8 KiB and more, 1 MiB of bodies per
// op: the JSON document (bodies base64) alone ("json"), and built then
// encoded to UTF-16 as go-mssqldb's str2ucs2 encodes an nvarchar(max)
// parameter ("wire"), in wire bytes per body byte (wire/body), time and
// memory. A table-valued parameter would send each body as varbinary(max),
// 1 wire byte per body byte plus a few bytes of framing (MS-TDS PLP
// chunks), and no base64 or UTF-16 pass; see docs/transports/sqlserver.md,
// Insert size.
func BenchmarkInsertEncoding(b *testing.B) {
	for _, size := range []int{8 << 10, 64 << 10, 1 << 20} {
		rows := make([]sqlqueue.InsertRow, max(1, (1<<20)/size))
		body := bytes.Repeat([]byte{0x5A, 0xA5, 0x00, 0xFF}, size/4)
		for i := range rows {
			rows[i] = sqlqueue.InsertRow{UUID: fmt.Sprintf("%036d", i), Headers: []byte(`{"trace":"abc"}`), Body: body}
		}
		b.Run(fmt.Sprintf("json/body=%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(rows) * size))
			d := Dialect{}
			for b.Loop() {
				_ = d.Insert(testQueue, rows)
			}
		})
		b.Run(fmt.Sprintf("wire/body=%dKiB", size>>10), func(b *testing.B) {
			var wire int
			d := Dialect{}
			b.SetBytes(int64(len(rows) * size))
			for b.Loop() {
				wire = 0
				for _, st := range d.Insert(testQueue, rows) {
					wire += len(str2ucs2(string(st.Args[0].(mssql.NVarCharMax))))
				}
			}
			b.ReportMetric(float64(wire)/float64(len(rows)*size), "wire/body")
		})
	}
}

// str2ucs2 is go-mssqldb v1.11.2's encoding of a string parameter (tds.go).
func str2ucs2(s string) []byte {
	res := utf16.Encode([]rune(s))
	ucs2 := make([]byte, 2*len(res))
	for i := 0; i < len(res); i++ {
		ucs2[2*i] = byte(res[i])
		ucs2[2*i+1] = byte(res[i] >> 8)
	}
	return ucs2
}
