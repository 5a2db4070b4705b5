package sqlserver

// An in-process fake SQL Server speaking just enough TDS 7.4 (MS-TDS) for
// go-mssqldb v1.11.2, so that tests can see the requests the driver sends
// (above all the @params declaration list of sp_executesql, part of SQL
// Server's plan-cache key) without a server. It runs no SQL: every batch and
// every sp_executesql call succeeds with no result set and no row count,
// unless FailNext, FailMatching or StallNext says otherwise, or Answer
// gives it rows to return.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"

	mssql "github.com/microsoft/go-mssqldb"
)

// Packet types (MS-TDS 2.2.3.1.1), tokens (2.2.7), DONE status bits (2.2.7.6).
const (
	pktSQLBatch  = 1
	pktRPC       = 3
	pktReply     = 4
	pktAttention = 6
	pktTransMgr  = 14
	pktLogin7    = 16
	pktPrelogin  = 18

	tokError     = 0xAA
	tokLoginAck  = 0xAD
	tokEnvChange = 0xE3
	tokDone      = 0xFD
	tokDoneProc  = 0xFE

	doneError = 0x02
	doneAttn  = 0x20
)

// rpcCall is one sp_executesql call as the driver sent it.
type rpcCall struct {
	Stmt  string // @stmt: the statement text
	Decls string // @params: the declaration list, e.g. "@p1 nvarchar(3),@p2 bigint"
	Args  []any  // the values of @p1, @p2, …, decoded by readParam
}

// fakeTDS is a TDS listener on 127.0.0.1 that records what it is sent.
type fakeTDS struct {
	t  *testing.T
	ln net.Listener
	wg sync.WaitGroup // the accept loop and one goroutine per connection

	mu      sync.Mutex
	closed  bool
	conns   map[net.Conn]struct{}
	calls   []rpcCall
	batches []string
	log     []string                  // every request's text and every BEGIN, COMMIT and ROLLBACK, in order
	fails   []failRule                // errors for the next matching requests, first rule first
	answer  func(text string) [][]any // rows for a request's text (see Answer)
	calling func(c rpcCall) [][]any   // rows for a request and its arguments (see AnswerCall)
	stall   bool                      // the next RPC or batch waits for an ATTENTION
	tranID  uint64                    // the last transaction descriptor handed out
}

// startFakeTDS listens on 127.0.0.1:0; t.Cleanup closes the listener and
// every connection, and waits for all of the fake's goroutines to end.
func startFakeTDS(t *testing.T) *fakeTDS {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTDS{t: t, ln: ln, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.stop)
	return f
}

// DSN is a go-mssqldb URL for the fake. encrypt=disable makes the client
// send ENCRYPT_NOT_SUP, and the fake answers ENCRYPT_NOT_SUP: no TLS.
func (f *fakeTDS) DSN() string {
	return fmt.Sprintf("sqlserver://sa:x@%s?database=test&encrypt=disable", f.ln.Addr())
}

// Calls returns every sp_executesql call received, in order.
func (f *fakeTDS) Calls() []rpcCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Log returns the text of every request (batch or sp_executesql) and the
// transaction manager's requests as "BEGIN", "COMMIT" and "ROLLBACK", in
// the order they arrived.
func (f *fakeTDS) Log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// Batches returns the text of every SQL batch received (the driver sends a
// statement without arguments as a batch, not through sp_executesql).
func (f *fakeTDS) Batches() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

// failRule fails the next n requests whose text contains match.
type failRule struct {
	match string
	n     int
	err   mssql.Error
}

// FailNext makes the next RPC or SQL batch (recorded as usual) answer with
// an ERROR token of this number and message followed by a DONE with the
// error bit, as SQL Server does for e.g. 1205 (deadlock victim); go-mssqldb
// returns it as an mssql.Error.
func (f *fakeTDS) FailNext(number int32, msg string) { f.FailMatching("", 1, number, msg) }

// FailMatching is FailNext for the next n requests whose text (the batch,
// or sp_executesql's @stmt) contains match; others pass.
func (f *fakeTDS) FailMatching(match string, n int, number int32, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = append(f.fails, failRule{match: match, n: n, err: mssql.Error{Number: number, Message: msg}})
}

// Answer makes every request that neither fails nor stalls return the rows
// fn gives for its text, as one result set (none when fn returns none).
// Columns take their type from the first row: int64 bigint, int32 int,
// bool bit, string nvarchar(4000), []byte varbinary(8000); no NULLs.
func (f *fakeTDS) Answer(fn func(text string) [][]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer, f.calling = fn, nil
}

// AnswerCall is Answer for a function that also reads the request's
// arguments (none for a SQL batch), the way a fake queue needs to; it
// replaces Answer's function.
func (f *fakeTDS) AnswerCall(fn func(c rpcCall) [][]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer, f.calling = nil, fn
}

// StallNext makes the next RPC or SQL batch (recorded as usual) go
// unanswered until the client cancels it with an ATTENTION, which is
// answered with DONE and the attention bit, as SQL Server does.
func (f *fakeTDS) StallNext() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stall = true
}

func (f *fakeTDS) stop() {
	_ = f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *fakeTDS) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // the listener is closed
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			_ = c.Close()
			return
		}
		f.conns[c] = struct{}{}
		f.wg.Add(1)
		f.mu.Unlock()
		go f.serve(c)
	}
}

// serve answers one connection's messages in turn until it is closed.
func (f *fakeTDS) serve(c net.Conn) {
	defer f.wg.Done()
	defer func() {
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
		_ = c.Close()
	}()
	// Reply packets must fit the client's buffer: its requested packet
	// size, at least 512, which LOGIN7 tells us.
	pktSize := 512
	for {
		typ, msg, err := readMessage(c)
		if err != nil {
			return // EOF: the client closed the connection, or stop did
		}
		reply := f.handle(typ, msg, &pktSize)
		if reply == nil {
			continue // stalled: the ATTENTION that follows is answered
		}
		if writeMessage(c, reply, pktSize) != nil {
			return
		}
	}
}

// handle returns the reply to one client message. A message the fake cannot
// parse fails the test and is answered with error 50000.
func (f *fakeTDS) handle(typ byte, msg []byte, pktSize *int) (reply []byte) {
	defer func() {
		if p := recover(); p != nil {
			f.t.Errorf("faketds: packet type %d: %v", typ, p)
			reply = appendError(nil, 50000, fmt.Sprint(p))
			reply = appendDone(reply, tokDone, doneError)
		}
	}()
	switch typ {
	case pktPrelogin:
		return preloginReply()
	case pktLogin7:
		return loginReply(msg, pktSize)
	case pktSQLBatch:
		r := reader{msg}
		r.skipAllHeaders()
		text := ucs2(r.b)
		return f.record(tokDone, rpcCall{Stmt: text}, func() { f.batches = append(f.batches, text) })
	case pktRPC:
		call := readRPC(msg)
		return f.record(tokDoneProc, call, func() { f.calls = append(f.calls, call) })
	case pktTransMgr:
		return f.transMgrReply(msg)
	case pktAttention:
		// Cancel: the request has been answered already (or stalled), so
		// only the acknowledgement (DONE with the attention bit) is due.
		return appendDone(nil, tokDone, doneAttn)
	}
	panic(fmt.Errorf("unsupported packet type %d", typ))
}

// record stores a request and answers it: DONE (final, no count), after
// the rows Answer gives; after FailNext or FailMatching, ERROR + DONE with
// the error bit; after StallNext, nothing.
func (f *fakeTDS) record(done byte, call rpcCall, add func()) []byte {
	text := call.Stmt
	f.mu.Lock()
	add()
	f.log = append(f.log, text)
	stall := f.stall
	f.stall = false
	var fail *mssql.Error
	for i := range f.fails {
		if r := &f.fails[i]; r.n > 0 && strings.Contains(text, r.match) {
			r.n--
			fail = &r.err
			break
		}
	}
	answer, calling := f.answer, f.calling
	f.mu.Unlock()
	switch {
	case stall:
		return nil
	case fail != nil:
		return appendDone(appendError(nil, fail.Number, fail.Message), done, doneError)
	}
	var b []byte
	switch {
	case answer != nil:
		b = appendRows(b, answer(text))
	case calling != nil:
		b = appendRows(b, calling(call))
	}
	return appendDone(b, done, 0)
}

// appendRows appends COLMETADATA (2.2.7.4) and one ROW (2.2.7.19) per row,
// the columns typed after the first row's values (see Answer).
func appendRows(b []byte, rows [][]any) []byte {
	if len(rows) == 0 {
		return b
	}
	b = append(b, 0x81)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(rows[0])))
	for i, v := range rows[0] {
		b = binary.LittleEndian.AppendUint32(b, 0)    // UserType
		b = binary.LittleEndian.AppendUint16(b, 0x01) // Flags: nullable
		switch v.(type) {
		case int64:
			b = append(b, 0x7F) // INT8TYPE
		case int32:
			b = append(b, 0x38) // INT4TYPE
		case bool:
			b = append(b, 0x32) // BITTYPE
		case string:
			b = append(b, 0xE7, 0x40, 0x1F)             // NVARCHARTYPE, 8,000 bytes
			b = append(b, 0x09, 0x04, 0xD0, 0x00, 0x34) // collation
		case []byte:
			b = append(b, 0xA5, 0x40, 0x1F) // BIGVARBINARYTYPE, 8,000 bytes
		default:
			panic(fmt.Errorf("faketds: cannot answer a %T", v))
		}
		b = appendBVarChar(b, "c"+strconv.Itoa(i))
	}
	for _, row := range rows {
		b = append(b, 0xD1)
		for _, v := range row {
			switch v := v.(type) {
			case int64:
				b = binary.LittleEndian.AppendUint64(b, uint64(v))
			case int32:
				b = binary.LittleEndian.AppendUint32(b, uint32(v))
			case bool:
				if v {
					b = append(b, 1)
				} else {
					b = append(b, 0)
				}
			case string:
				u := utf16.Encode([]rune(v))
				b = binary.LittleEndian.AppendUint16(b, uint16(2*len(u)))
				for _, c := range u {
					b = binary.LittleEndian.AppendUint16(b, c)
				}
			case []byte:
				b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
				b = append(b, v...)
			}
		}
	}
	return b
}

// readMessage reads packets (8-byte header: type, status, big-endian length
// including the header, SPID, packet number, window) up to the one whose
// status has the end-of-message bit, and returns their payloads joined.
func readMessage(c net.Conn) (typ byte, msg []byte, err error) {
	var h [8]byte
	for {
		if _, err = io.ReadFull(c, h[:]); err != nil {
			return 0, nil, err
		}
		n := int(binary.BigEndian.Uint16(h[2:]))
		if n < len(h) {
			return 0, nil, fmt.Errorf("faketds: packet length %d", n)
		}
		start := len(msg)
		msg = append(msg, make([]byte, n-len(h))...)
		if _, err = io.ReadFull(c, msg[start:]); err != nil {
			return 0, nil, err
		}
		if h[1]&0x01 != 0 { // EOM
			return h[0], msg, nil
		}
	}
}

// writeMessage sends msg as reply packets of at most size bytes each.
func writeMessage(c net.Conn, msg []byte, size int) error {
	for seq := byte(1); ; seq++ {
		n := min(len(msg), size-8)
		var status byte
		if n == len(msg) {
			status = 0x01 // EOM
		}
		pkt := []byte{pktReply, status, byte((8 + n) >> 8), byte(8 + n), 0, 0, seq, 0}
		if _, err := c.Write(append(pkt, msg[:n]...)); err != nil {
			return err
		}
		if msg = msg[n:]; status != 0 {
			return nil
		}
	}
}

// preloginReply (2.2.6.5): an option table of (token, big-endian offset,
// big-endian length), a terminator, then the data. ENCRYPTION is
// ENCRYPT_NOT_SUP, so the client does no TLS handshake whatever it asked.
func preloginReply() []byte {
	return []byte{
		0x00, 0, 11, 0, 6, // VERSION: 6 bytes at 11
		0x01, 0, 17, 0, 1, // ENCRYPTION: 1 byte at 17
		0xFF,              // terminator
		16, 0, 0, 0, 0, 0, // version 16.0.0, sub-build 0
		0x02, // ENCRYPT_NOT_SUP
	}
}

// loginReply accepts any LOGIN7 (2.2.6.4; the credentials are not checked)
// with LOGINACK, ENVCHANGE for the requested database and packet size, and
// DONE.
func loginReply(msg []byte, pktSize *int) []byte {
	r := reader{msg}
	r.next(8) // Length, TDSVersion
	size := max(int(r.u32()), 512)
	r.next(68 - 12) // up to ibDatabase
	off, n := r.u16(), r.u16()
	db := ucs2(msg[off : off+2*n])
	*pktSize = size

	ack := []byte{1, 0x74, 0x00, 0x00, 0x04} // interface T-SQL, TDS 7.4 (big-endian)
	ack = appendBVarChar(ack, "faketds")     // program name
	ack = append(ack, 16, 0, 0, 0)           // program version
	b := append([]byte{tokLoginAck}, byte(len(ack)), byte(len(ack)>>8))
	b = append(b, ack...)
	b = appendEnvChange(b, 1, appendBVarChar(nil, db), appendBVarChar(nil, "master"))
	s := strconv.Itoa(size)
	b = appendEnvChange(b, 4, appendBVarChar(nil, s), appendBVarChar(nil, s))
	return appendDone(b, tokDone, 0)
}

// transMgrReply answers a transaction manager request (2.2.6.9) so that
// database/sql transactions work: BEGIN hands out a descriptor in ENVCHANGE
// type 8, COMMIT and ROLLBACK end it with types 9 and 10.
func (f *fakeTDS) transMgrReply(msg []byte) []byte {
	r := reader{msg}
	r.skipAllHeaders()
	var b []byte
	switch req := r.u16(); req {
	case 5: // TM_BEGIN_XACT
		f.mu.Lock()
		f.log = append(f.log, "BEGIN")
		f.tranID++
		id := binary.LittleEndian.AppendUint64([]byte{8}, f.tranID)
		f.mu.Unlock()
		b = appendEnvChange(b, 8, id, []byte{0})
	case 7, 8: // TM_COMMIT_XACT, TM_ROLLBACK_XACT
		f.mu.Lock()
		f.log = append(f.log, map[int]string{7: "COMMIT", 8: "ROLLBACK"}[req])
		f.mu.Unlock()
		b = appendEnvChange(b, byte(req+2), []byte{0}, []byte{0})
	default:
		panic(fmt.Errorf("unsupported transaction manager request %d", req))
	}
	return appendDone(b, tokDone, 0)
}

// readRPC parses an RPC request (2.2.6.6): ALL_HEADERS, the procedure (the
// driver calls sp_executesql by id: 0xFFFF then 10), option flags, then the
// parameters: @stmt and @params (both nvarchar) and the statement's values.
func readRPC(msg []byte) rpcCall {
	r := reader{msg}
	r.skipAllHeaders()
	if id := r.u16(); id != 0xFFFF {
		panic(fmt.Errorf("RPC of procedure %q: only sp_executesql is supported", ucs2(r.next(2*id))))
	}
	if id := r.u16(); id != 10 {
		panic(fmt.Errorf("RPC of procedure id %d: only sp_executesql (10) is supported", id))
	}
	r.u16() // option flags
	var call rpcCall
	for i := 0; len(r.b) > 0; i++ {
		v := r.readParam()
		switch i {
		case 0:
			call.Stmt, _ = v.(string)
		case 1:
			call.Decls, _ = v.(string)
		default:
			call.Args = append(call.Args, v)
		}
	}
	return call
}

// TYPE_INFO (2.2.5.4) of the types go-mssqldb sends, by type id: the
// fixed-length types' value sizes (NULLTYPE: none); how many metadata bytes
// the BYTELEN types have (a max length; precision and scale too for
// decimals; a scale for the times, none for DATEN) before a length byte and
// the value; the USHORTLEN types' collation bytes after a 2-byte max length
// (0xFFFF: (max), and the value is PLP) before a 2-byte length and the value.
var (
	fixedLen     = map[byte]int{0x1F: 0, 0x30: 1, 0x32: 1, 0x34: 2, 0x38: 4, 0x3A: 4, 0x3B: 4, 0x7A: 4, 0x3C: 8, 0x3D: 8, 0x3E: 8, 0x7F: 8}
	byteLenMeta  = map[byte]int{0x24: 1, 0x26: 1, 0x68: 1, 0x6D: 1, 0x6E: 1, 0x6F: 1, 0x2F: 1, 0x27: 1, 0x2D: 1, 0x25: 1, 0x37: 3, 0x3F: 3, 0x6A: 3, 0x6C: 3, 0x28: 0, 0x29: 1, 0x2A: 1, 0x2B: 1}
	shortLenMeta = map[byte]int{0xA5: 0, 0xAD: 0, 0xA7: 5, 0xAF: 5, 0xE7: 5, 0xEF: 5}
)

// readParam reads one parameter: B_VARCHAR name, status flags, TYPE_INFO
// and value. Values decode to nil (NULL), string ([n]var/char), int64,
// bool, float64; others (binary, dates, decimals, GUIDs) stay raw []byte.
func (r *reader) readParam() any {
	r.next(2 * int(r.u8())) // name: empty for @stmt and @params, else @pN
	if r.u8()&0x08 != 0 {
		panic(errors.New("encrypted parameters are not supported"))
	}
	typ := r.u8()
	var v []byte
	if n, ok := fixedLen[typ]; ok {
		v = r.next(n)
	} else if n, ok := byteLenMeta[typ]; ok {
		r.next(n)
		v = r.next(int(r.u8()))
	} else if n, ok := shortLenMeta[typ]; ok {
		plp := r.u16() == 0xFFFF
		r.next(n)
		if plp {
			v = r.plp()
		} else if n := r.u16(); n != 0xFFFF {
			v = r.next(n)
		}
	} else {
		panic(fmt.Errorf("parameter type 0x%02X is not supported", typ))
	}
	if _, short := shortLenMeta[typ]; v == nil || len(v) == 0 && !short {
		return nil // NULL: PLP or USHORTLEN NULL; NULLTYPE; BYTELEN length 0
	}
	switch typ {
	case 0xE7, 0xEF: // NVARCHAR, NCHAR
		return ucs2(v)
	case 0xA7, 0xAF, 0x27, 0x2F: // VARCHAR, CHAR
		return string(v)
	case 0x30, 0x34, 0x38, 0x7F, 0x26: // INT1/2/4/8, INTN
		switch len(v) {
		case 1:
			return int64(v[0]) // tinyint is unsigned
		case 2:
			return int64(int16(binary.LittleEndian.Uint16(v)))
		case 4:
			return int64(int32(binary.LittleEndian.Uint32(v)))
		}
		return int64(binary.LittleEndian.Uint64(v))
	case 0x32, 0x68: // BIT, BITN
		return v[0] != 0
	case 0x3B, 0x3E, 0x6D: // FLT4, FLT8, FLTN
		if len(v) == 4 {
			return float64(math.Float32frombits(binary.LittleEndian.Uint32(v)))
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(v))
	}
	return v
}

// plp reads a PARTLENTYPE value (2.2.5.2.3): a 64-bit total length
// (all ones: NULL; all ones but the lowest bit: unknown), then chunks each
// with a 32-bit length, ended by an empty one.
func (r *reader) plp() []byte {
	if r.u64() == ^uint64(0) {
		return nil
	}
	v := []byte{}
	for n := r.u32(); n != 0; n = r.u32() {
		v = append(v, r.next(int(n))...)
	}
	return v
}

// reader reads little-endian fields; a short message panics, and handle
// turns the panic into a failed test and an error reply.
type reader struct{ b []byte }

func (r *reader) next(n int) []byte {
	if n > len(r.b) {
		panic(fmt.Errorf("message too short: %d bytes wanted, %d left", n, len(r.b)))
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() byte    { return r.next(1)[0] }
func (r *reader) u16() int    { return int(binary.LittleEndian.Uint16(r.next(2))) }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.next(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.next(8)) }

// skipAllHeaders skips ALL_HEADERS (2.2.5.3), whose length counts itself.
func (r *reader) skipAllHeaders() { r.next(int(r.u32()) - 4) }

// ucs2 decodes UTF-16LE.
func ucs2(b []byte) string {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u))
}

// appendBVarChar appends B_VARCHAR: a byte count of UTF-16 code units,
// then UTF-16LE; appendUsVarChar US_VARCHAR, whose count has two bytes.
func appendBVarChar(b []byte, s string) []byte {
	u := utf16.Encode([]rune(s))
	return appendUTF16(append(b, byte(len(u))), u)
}

func appendUsVarChar(b []byte, s string) []byte {
	u := utf16.Encode([]rune(s))
	return appendUTF16(binary.LittleEndian.AppendUint16(b, uint16(len(u))), u)
}

func appendUTF16(b []byte, u []uint16) []byte {
	for _, c := range u {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	return b
}

// appendEnvChange appends ENVCHANGE (2.2.7.9): length, type, new and old
// value (each already encoded: B_VARCHAR or B_VARBYTE as the type needs).
func appendEnvChange(b []byte, typ byte, newV, oldV []byte) []byte {
	b = append(b, tokEnvChange)
	b = binary.LittleEndian.AppendUint16(b, uint16(1+len(newV)+len(oldV)))
	b = append(b, typ)
	return append(append(b, newV...), oldV...)
}

// appendError appends ERROR (2.2.7.10): number, state, class (16), message
// (US_VARCHAR), server name, procedure name (B_VARCHAR), line number.
func appendError(b []byte, number int32, msg string) []byte {
	body := binary.LittleEndian.AppendUint32(nil, uint32(number))
	body = append(body, 1, 16) // state, class
	body = appendUsVarChar(body, msg)
	body = appendBVarChar(body, "faketds")
	body = appendBVarChar(body, "")
	body = binary.LittleEndian.AppendUint32(body, 1)
	b = append(b, tokError)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...)
}

// appendDone appends DONE, DONEPROC (2.2.7.6, 2.2.7.7): status, current
// command, row count (not valid: no DONE_COUNT bit).
func appendDone(b []byte, tok byte, status uint16) []byte {
	b = append(b, tok)
	b = binary.LittleEndian.AppendUint16(b, status)
	b = binary.LittleEndian.AppendUint16(b, 0)
	return binary.LittleEndian.AppendUint64(b, 0)
}
