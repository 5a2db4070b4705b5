package sqlserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/berth-go/berth/transport/sqlqueue"
)

var (
	testTables = sqlqueue.Tables{Schema: "app"}
	testNames  = sqlqueue.NamesFor(Dialect{}, testTables)
	testQueue  = sqlqueue.QueueFor(Dialect{}, testTables, "orders", "billing")
	// probeQueues are the queues of the MultiProbe golden.
	probeQueues = []sqlqueue.Queue{testQueue, sqlqueue.QueueFor(Dialect{}, testTables, "orders", "")}
	testRefs    = []sqlqueue.Ref{{ID: 7, Owner: 42}, {ID: 8, Owner: 42}}
)

const refsArg = `[{"id":7,"owner":42},{"id":8,"owner":42}]`

func one(s sqlqueue.Stmt) []sqlqueue.Stmt { return []sqlqueue.Stmt{s} }

// TestStatementsGolden pins the exact text and arguments of every
// statement.
func TestStatementsGolden(t *testing.T) {
	d := Dialect{}
	n, q := testNames, testQueue
	cases := []struct {
		name  string
		got   []sqlqueue.Stmt
		want  []string
		wantA [][]any
	}{
		{"Lock wait", one(d.Lock("app.berth_schema", true)), []string{goldenLock}, [][]any{{nv("app.berth_schema")}}},
		{"Lock try", one(d.Lock("app.berth_sweep:x", false)), []string{goldenTryLock}, [][]any{{nv("app.berth_sweep:x")}}},
		{"SharedLock", one(d.SharedLock("app.berth_topic:orders")), []string{goldenSharedLock}, [][]any{{nv("app.berth_topic:orders")}}},
		{"VersionTable", d.VersionTable(n), []string{goldenCreateSchema, goldenVersionTable}, [][]any{nil, nil}},
		{"SchemaVersion", one(d.SchemaVersion(n)), []string{goldenSchemaVersion}, [][]any{nil}},
		{"SetSchemaVersion", one(d.SetSchemaVersion(n, 1)), []string{goldenSetSchemaVersion}, [][]any{nil}},
		{"Migrations", d.Migrations(n)[0].Stmts, []string{goldenSubscriptions, goldenErrors, goldenErrorsIndex}, [][]any{nil, nil, nil}},
		{"Migration 2", d.Migrations(n)[1].Stmts, []string{goldenUpgradeQueues}, [][]any{nil}},
		{"Migration 4", d.Migrations(n)[3].Stmts, []string{goldenUpgradeQueues}, [][]any{nil}},
		{"CreateQueue", d.CreateQueue(q), []string{goldenQueueTable, goldenPendingIndex, goldenLeasedIndex, goldenUpgradeQueue}, [][]any{nil, nil, nil, nil}},
		{"QueueTables", one(d.QueueTables(n)), []string{goldenQueueTables}, [][]any{nil}},
		{"MigrateQueue", d.MigrateQueue(q), []string{goldenUpgradeQueue}, [][]any{nil}},
		{"Subscribe", one(d.Subscribe(n, q)), []string{goldenSubscribe}, [][]any{{nv("orders"), nv("billing"), nv("berth_q_orders__billing")}}},
		{"Subscriptions", one(d.Subscriptions(n, "orders")), []string{goldenSelectSubscriptions}, [][]any{{nv("orders")}}},
		{"Insert", d.Insert(q, []sqlqueue.InsertRow{
			{UUID: "a", Headers: []byte(`{}`), Body: []byte("x")},
			{UUID: "b", Headers: []byte(`{"k":"v"}`), Delay: 1500 * time.Millisecond, TTL: time.Hour},
		}), []string{goldenInsert2}, [][]any{{nv(`[{"n":1,"u":"a","h":"{}","b":"eA==","d":0,"t":0},{"n":2,"u":"b","h":"{\"k\":\"v\"}","b":"","d":1500,"t":3600000}]`), nv("[]")}}},
		{"Insert keyed", d.Insert(q, []sqlqueue.InsertRow{
			{UUID: "a", Headers: []byte(`{}`), OrderingKey: "k2"},
			{UUID: "b", Headers: []byte(`{}`), OrderingKey: "k1"},
			{UUID: "c", Headers: []byte(`{}`), OrderingKey: "k2"},
		}), []string{goldenInsert2}, [][]any{{nv(`[{"n":1,"u":"a","h":"{}","b":"","d":0,"t":0,"k":"k2"},{"n":2,"u":"b","h":"{}","b":"","d":0,"t":0,"k":"k1"},{"n":3,"u":"c","h":"{}","b":"","d":0,"t":0,"k":"k2"}]`), nv(`["k1","k2"]`)}}},
		{"Claim", one(d.Claim(q, 42, 10, time.Minute)), []string{goldenClaim}, [][]any{{int64(10), int64(42), int64(60000)}}},
		{"ClaimDirect", one(d.ClaimDirect(q, 42, 10, 4, time.Minute, 30*time.Second)), []string{goldenClaimDirect}, [][]any{{int64(10), int64(42), int64(60000), int64(4), int64(30000)}}},
		{"ClaimComplete", one(d.ClaimComplete(q, 42, 10, 0, time.Minute, 30*time.Second, testRefs)), []string{goldenClaimComplete}, [][]any{{int64(10), int64(42), int64(60000), int64(0), int64(30000), nv(refsArg)}}},
		{"ClaimKeys", one(d.ClaimKeys(q, 42, []string{"b", "a"}, nil, 10, 4, time.Minute, 30*time.Second, nil)), []string{goldenClaimKeys}, [][]any{{int64(10), int64(42), int64(60000), int64(4), int64(30000), nv(`["b","a"]`)}}},
		{"ClaimKeys riding", one(d.ClaimKeys(q, 42, []string{"a"}, nil, 10, 0, time.Minute, 30*time.Second, testRefs)), []string{goldenClaimKeysRiding}, [][]any{{int64(10), int64(42), int64(60000), int64(0), int64(30000), nv(`["a"]`), nv(refsArg)}}},
		{"MultiProbe", one(d.MultiProbe(probeQueues)), []string{goldenMultiProbe}, [][]any{nil}},

		{"Begin", one(d.Begin(q, testRefs, 30*time.Second)), []string{goldenBegin}, [][]any{{nv(refsArg), int64(30000)}}},
		{"Complete", one(d.Complete(q, testRefs)), []string{goldenComplete}, [][]any{{nv(refsArg)}}},
		{"Renew", one(d.Renew(q, testRefs, 30*time.Second)), []string{goldenRenew}, [][]any{{nv(refsArg), int64(30000)}}},
		{"Retry", one(d.Retry(q, []sqlqueue.RetryRef{{Ref: testRefs[0], Delay: 100 * time.Millisecond, Line: "attempt 1 at \"t\"\n"}})), []string{goldenRetry}, [][]any{{nv(`[{"id":7,"owner":42,"delay_ms":100,"line":"attempt 1 at \"t\"\n"}]`)}}},
		{"Release", one(d.Release(q, testRefs)), []string{goldenRelease}, [][]any{{nv(refsArg)}}},
		{"ReleaseDirect", one(d.ReleaseDirect(q, testRefs)), []string{goldenReleaseDirect}, [][]any{{nv(refsArg)}}},
		{"DeadLetter", d.DeadLetter(n, q, testRefs[0], "boom"), []string{goldenDeadLetter}, [][]any{{int64(7), int64(42), nv("berth_q_orders__billing"), nv("boom")}}},
		{"Recover", one(d.Recover(q, 10, 1000)), []string{goldenRecover}, [][]any{{int64(1000), int64(10)}}},
		{"DeadLetterExpired", d.DeadLetterExpired(n, q, 10, "expired", 1000), []string{goldenDeadLetterExpired}, [][]any{{int64(1000), int64(10), nv("berth_q_orders__billing"), nv("expired")}}},
		{"DropExpired", one(d.DropExpired(q, 1000)), []string{goldenDropExpired}, [][]any{{int64(1000)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.got) != len(c.want) {
				t.Fatalf("got %d statements, want %d", len(c.got), len(c.want))
			}
			for i, st := range c.got {
				if st.SQL != c.want[i] {
					t.Errorf("statement %d text changed:\n--- got\n%s\n--- want\n%s", i, st.SQL, c.want[i])
				}
				if !reflect.DeepEqual(st.Args, c.wantA[i]) {
					t.Errorf("statement %d args = %#v, want %#v", i, st.Args, c.wantA[i])
				}
			}
		})
	}
}

var placeholder = regexp.MustCompile(`@p(\d+)`)

// TestPlaceholdersMatchArgs checks, for every statement, that the
// placeholders used are exactly @p1…@pN for N arguments: go-mssqldb
// declares one sp_executesql parameter per argument and names the i-th
// @p<i>.
func TestPlaceholdersMatchArgs(t *testing.T) {
	for name, sts := range allStatements() {
		for i, st := range sts {
			used := map[int]bool{}
			for _, m := range placeholder.FindAllStringSubmatch(st.SQL, -1) {
				k, _ := strconv.Atoi(m[1])
				used[k] = true
			}
			if len(used) != len(st.Args) {
				t.Errorf("%s[%d]: %d distinct placeholders for %d args", name, i, len(used), len(st.Args))
			}
			for k := 1; k <= len(st.Args); k++ {
				if !used[k] {
					t.Errorf("%s[%d]: @p%d unused", name, i, k)
				}
			}
			if len(st.Args) > MaxParams {
				t.Errorf("%s[%d]: %d args, over MaxParams", name, i, len(st.Args))
			}
		}
	}
}

// TestBatchShape checks house rules every batch follows: SET NOCOUNT ON
// first, every row-returning DML through OUTPUT … INTO a table variable
// (never a bare OUTPUT, which fails on tables with triggers), and
// READPAST always paired with READCOMMITTEDLOCK.
func TestBatchShape(t *testing.T) {
	for name, sts := range allStatements() {
		for i, st := range sts {
			if !strings.HasPrefix(st.SQL, "SET NOCOUNT ON;\n") {
				t.Errorf("%s[%d]: does not start with SET NOCOUNT ON", name, i)
			}
			for _, line := range strings.Split(st.SQL, "\n") {
				if strings.HasPrefix(line, "OUTPUT ") && !strings.HasSuffix(strings.TrimSuffix(line, ";"), " INTO @t") {
					t.Errorf("%s[%d]: OUTPUT without INTO @t: %q", name, i, line)
				}
				if strings.Contains(line, "READPAST") && !strings.Contains(line, "READCOMMITTEDLOCK") {
					t.Errorf("%s[%d]: READPAST without READCOMMITTEDLOCK: %q", name, i, line)
				}
			}
			if strings.Contains(st.SQL, "BEGIN TRANSACTION") != strings.Contains(st.SQL, "COMMIT TRANSACTION") {
				t.Errorf("%s[%d]: unbalanced transaction", name, i)
			}
		}
	}
}

func allStatements() map[string][]sqlqueue.Stmt {
	d := Dialect{}
	n, q := testNames, testQueue
	rows := make([]sqlqueue.InsertRow, 1000)
	for i := range rows {
		rows[i] = sqlqueue.InsertRow{UUID: strconv.Itoa(i), Headers: []byte("{}"), Body: []byte("b")}
	}
	var ms []sqlqueue.Stmt
	for _, m := range d.Migrations(n) {
		ms = append(ms, m.Stmts...)
	}
	return map[string][]sqlqueue.Stmt{
		"Lock":              {d.Lock("k", true), d.Lock("k", false)},
		"VersionTable":      d.VersionTable(n),
		"SchemaVersion":     {d.SchemaVersion(n), d.SetSchemaVersion(n, 3)},
		"Migrations":        ms,
		"CreateQueue":       d.CreateQueue(q),
		"Subscribe":         {d.Subscribe(n, q), d.Subscriptions(n, "t")},
		"Insert":            d.Insert(q, rows),
		"InsertInTx":        d.InsertInTx(q, rows),
		"CompleteInTx":      {d.CompleteInTx(q, testRefs)},
		"Claim":             {d.Claim(q, 1, 64, time.Minute)},
		"ClaimDirect":       {d.ClaimDirect(q, 1, 64, 8, time.Minute, time.Second)},
		"ClaimComplete":     {d.ClaimComplete(q, 1, 64, 8, time.Minute, time.Second, testRefs)},
		"ClaimKeys":         {d.ClaimKeys(q, 1, []string{"a", "b"}, nil, 64, 8, time.Minute, time.Second, nil), d.ClaimKeys(q, 1, []string{"a"}, nil, 64, 8, time.Minute, time.Second, testRefs)},
		"ReleaseDirect":     {d.ReleaseDirect(q, testRefs)},
		"MultiProbe":        {d.MultiProbe(probeQueues[:1]), d.MultiProbe(probeQueues)},
		"Begin":             {d.Begin(q, testRefs, time.Second)},
		"Complete":          {d.Complete(q, testRefs)},
		"Renew":             {d.Renew(q, testRefs, time.Second)},
		"Retry":             {d.Retry(q, []sqlqueue.RetryRef{{Ref: testRefs[0]}})},
		"Release":           {d.Release(q, testRefs)},
		"DeadLetter":        d.DeadLetter(n, q, testRefs[0], "r"),
		"Recover":           {d.Recover(q, 0, 10)},
		"DeadLetterExpired": d.DeadLetterExpired(n, q, 3, "r", 10),
		"DropExpired":       {d.DropExpired(q, 10)},
		"DeadLetterStray":   d.DeadLetterStray(n, q, 10),
		"FleetTables":       d.FleetTables(n),
		"UpsertListener":    {d.UpsertListener(n, testListener)},
		"FleetDeletes":      {d.DeleteListeners(n, "i"), d.DeleteStaleListeners(n)},
		"Listeners":         {d.Listeners(n)},
		"PauseQueue":        {d.PauseQueue(n, q.Name, "ops"), d.ResumeQueue(n, q.Name), d.PausedQueues(n)},
		"Parking":           {d.SharedLock("k"), d.Register(n, q), d.CopyParked(q, q), d.PruneParked(n, q, time.Hour, 10)},
	}
}

// testListener is a listeners-table row with every field set.
var testListener = sqlqueue.ListenerRow{
	Instance: "host/1/ab", Name: "orders", Queue: "berth_q_orders", Host: "host", PID: 1,
	Status: "accepting", Loop: "running", Wave: 8, Buffered: 1, InFlight: 2, BatchPending: 3,
	Latched: true, Faulted: true, Fault: "boom", FaultAt: time.UnixMilli(1), Rebuilds: 1,
	LastReceive: time.UnixMilli(2), StartedAt: time.UnixMilli(3), Interval: time.Second,
}

func TestQuoting(t *testing.T) {
	d := Dialect{}
	for in, want := range map[string]string{
		"orders":   "[orders]",
		"a]b":      "[a]]b]",
		"[x]":      "[[x]]]",
		"it's":     "[it's]",
		"with sp":  "[with sp]",
		"]]":       "[]]]]]",
		"berth_q_": "[berth_q_]",
	} {
		if got := d.QuoteIdent(in); got != want {
			t.Errorf("QuoteIdent(%q) = %q, want %q", in, got, want)
		}
	}
	if got, want := literal("it's [x]"), "N'it''s [x]'"; got != want {
		t.Errorf("literal = %q, want %q", got, want)
	}
	// A queue whose quoted name holds a quote stays one literal in
	// OBJECT_ID and INDEXPROPERTY look-ups.
	q := sqlqueue.Queue{Name: "o'q", Table: d.QuoteIdent("o'q")}
	sts := d.CreateQueue(q)
	if !strings.Contains(sts[0].SQL, "OBJECT_ID(N'[o''q]', N'U')") {
		t.Errorf("table DDL does not escape the literal:\n%s", sts[0].SQL)
	}
	if !strings.Contains(sts[1].SQL, "INDEXPROPERTY(OBJECT_ID(N'[o''q]'), N'o''q_pending', 'IndexID')") || !strings.Contains(sts[1].SQL, "CREATE INDEX [o'q_pending]") {
		t.Errorf("index DDL does not escape the name:\n%s", sts[1].SQL)
	}
	// Unqualified names (no schema) resolve in the user's default schema and
	// create no schema.
	n := sqlqueue.NamesFor(d, sqlqueue.Tables{})
	if n.Version != "[berth_schema_version]" {
		t.Errorf("unqualified version table = %q", n.Version)
	}
	if vt := d.VersionTable(n); len(vt) != 1 || strings.Contains(vt[0].SQL, "CREATE SCHEMA") {
		t.Errorf("VersionTable without schema = %v", vt)
	}
}

// insertedRow is one row of Insert's JSON document.
type insertedRow struct {
	N       int     `json:"n"`
	UUID    string  `json:"u"`
	Headers string  `json:"h"`
	Body    []byte  `json:"b"` // base64, as OPENJSON's varbinary(max) reads it
	DelayMS int64   `json:"d"`
	TTLMS   int64   `json:"t"`
	Key     *string `json:"k"` // absent: no ordering key (OPENJSON reads NULL)
}

func insertedRows(t *testing.T, st sqlqueue.Stmt) []insertedRow {
	t.Helper()
	if len(st.Args) != 2 {
		t.Fatalf("insert has %d args, want the rows' JSON document and their keys'", len(st.Args))
	}
	doc, ok := st.Args[0].(mssql.NVarCharMax)
	if !ok {
		t.Fatalf("insert arg is %T, want mssql.NVarCharMax", st.Args[0])
	}
	var rows []insertedRow
	if err := json.Unmarshal([]byte(doc), &rows); err != nil {
		t.Fatalf("insert document: %v", err)
	}
	return rows
}

// TestInsertSplitsAndKeepsOrder checks that inserts carry at most
// MaxRowsPerInsert rows each, that every statement has the same text, and
// that rows keep their order across statements.
func TestInsertSplitsAndKeepsOrder(t *testing.T) {
	for _, c := range []struct{ rows, stmts int }{{1, 1}, {999, 1}, {1000, 1}, {1001, 2}, {5000, 5}} {
		rows := make([]sqlqueue.InsertRow, c.rows)
		for i := range rows {
			rows[i] = sqlqueue.InsertRow{UUID: fmt.Sprint("m", i), Headers: []byte("{}"), Body: []byte{byte(i)}}
		}
		sts := Dialect{}.Insert(testQueue, rows)
		if len(sts) != c.stmts {
			t.Errorf("%d rows: %d statements, want %d", c.rows, len(sts), c.stmts)
			continue
		}
		next := 0
		for i, st := range sts {
			if st.SQL != sts[0].SQL {
				t.Errorf("%d rows, statement %d: text differs from the first", c.rows, i)
			}
			got := insertedRows(t, st)
			if len(got) > MaxRowsPerInsert {
				t.Errorf("%d rows, statement %d: %d rows", c.rows, i, len(got))
			}
			for j, r := range got {
				if want := fmt.Sprint("m", next); r.UUID != want || r.N != j+1 || len(r.Body) != 1 || r.Body[0] != byte(next) {
					t.Fatalf("%d rows, statement %d: row %d is %+v, want %s", c.rows, i, j, r, want)
				}
				next++
			}
		}
		if next != c.rows {
			t.Errorf("%d rows: %d inserted", c.rows, next)
		}
	}
	if sts := (Dialect{}).Insert(testQueue, nil); len(sts) != 0 {
		t.Errorf("no rows: %d statements", len(sts))
	}
}

// TestInsertDocumentRoundTrips checks the JSON document for values that
// need escaping: quotes and control characters in UUIDs and headers,
// non-ASCII text, binary and empty bodies (an empty body is "", never
// null: the column is NOT NULL).
func TestInsertDocumentRoundTrips(t *testing.T) {
	in := []sqlqueue.InsertRow{
		{UUID: `a"b\c`, Headers: []byte(`{"k":"v \"q\" \u0001 ü 😀"}`), Body: []byte{0, 1, 2, 0xff}},
		{UUID: "é", Headers: []byte(`{}`)},
		{UUID: "x", Headers: []byte(`{}`), Body: bytes.Repeat([]byte("z"), 70000), Delay: 1500 * time.Millisecond, TTL: time.Hour},
		{UUID: "k", Headers: []byte(`{}`), OrderingKey: `order "42" ü`},
	}
	got := insertedRows(t, Dialect{}.Insert(testQueue, in)[0])
	for i, r := range in {
		g := got[i]
		if g.UUID != r.UUID || g.Headers != string(r.Headers) || !bytes.Equal(g.Body, r.Body) || g.DelayMS != ms(r.Delay) || g.TTLMS != ms(r.TTL) {
			t.Errorf("row %d = %+v, want %+v", i, g, r)
		}
		if key := ""; g.Key != nil || r.OrderingKey != "" {
			if g.Key != nil {
				key = *g.Key
			}
			if g.Key == nil || key != r.OrderingKey {
				t.Errorf("row %d ordering key = %q (present %v), want %q", i, key, g.Key != nil, r.OrderingKey)
			}
		}
	}
	if !strings.Contains(string(Dialect{}.Insert(testQueue, in[1:2])[0].Args[0].(mssql.NVarCharMax)), `"b":""`) {
		t.Error("an empty body is not encoded as an empty string")
	}
}

func TestDurationEncoding(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Nanosecond, 1},
		{time.Millisecond, 1},
		{1500 * time.Microsecond, 2},
		{30 * time.Second, 30000},
		{25 * 24 * time.Hour, 25 * 24 * 3600 * 1000}, // past int32 milliseconds
		{MaxDuration, MaxDuration.Milliseconds()},
		{MaxDuration + time.Hour, MaxDuration.Milliseconds()},
		{math.MaxInt64, MaxDuration.Milliseconds()},
	} {
		if got := ms(c.in); got != c.want {
			t.Errorf("ms(%v) = %d, want %d", c.in, got, c.want)
		}
	}
	// Both halves of the encoding must fit DATEADD's int.
	maxMS := ms(MaxDuration)
	if maxMS/1000 > math.MaxInt32 || maxMS%1000 > math.MaxInt32 {
		t.Errorf("MaxDuration does not fit DATEADD's int as seconds")
	}
	// A delay past int32 milliseconds reaches the statement whole.
	sts := Dialect{}.Insert(testQueue, []sqlqueue.InsertRow{{UUID: "a", Headers: []byte("{}"), Body: []byte{}, Delay: 40 * 24 * time.Hour}})
	if got := insertedRows(t, sts[0])[0].DelayMS; got != int64(40*24*3600*1000) {
		t.Errorf("40-day delay = %v", got)
	}
}

func TestRefsJSON(t *testing.T) {
	refs := []sqlqueue.Ref{{ID: 1, Owner: math.MaxInt64}, {ID: math.MaxInt64, Owner: -5}, {ID: 0, Owner: 0}}
	var got []struct {
		ID    int64 `json:"id"`
		Owner int64 `json:"owner"`
	}
	if err := json.Unmarshal([]byte(refsJSON(refs)), &got); err != nil {
		t.Fatal(err)
	}
	for i, r := range refs {
		if got[i].ID != r.ID || got[i].Owner != r.Owner {
			t.Errorf("ref %d = %+v, want %+v", i, got[i], r)
		}
	}
	if s := refsJSON(nil); s != "[]" {
		t.Errorf("no refs = %q", s)
	}
	st := Dialect{}.Retry(testQueue, []sqlqueue.RetryRef{{Ref: refs[0], Delay: time.Second}, {Ref: refs[1], Delay: 100 * 365 * 24 * time.Hour}})
	var rr []struct {
		ID      int64 `json:"id"`
		Owner   int64 `json:"owner"`
		DelayMS int64 `json:"delay_ms"`
	}
	if err := json.Unmarshal([]byte(st.Args[0].(mssql.NVarCharMax)), &rr); err != nil {
		t.Fatal(err)
	}
	if rr[0].DelayMS != 1000 || rr[1].DelayMS != MaxDuration.Milliseconds() || rr[1].Owner != -5 {
		t.Errorf("retry refs = %+v", rr)
	}
	// A full settle batch is one argument, whatever its size.
	many := make([]sqlqueue.Ref, 1000)
	if st := (Dialect{}).Complete(testQueue, many); len(st.Args) != 1 {
		t.Errorf("1000 refs: %d args", len(st.Args))
	}
}

func TestRecoverAttemptsCap(t *testing.T) {
	for in, want := range map[int]int64{-1: math.MaxInt32, 0: math.MaxInt32, 1: 1, 10: 10, math.MaxInt: math.MaxInt32} {
		if got := (Dialect{}).Recover(testQueue, in, 5).Args[1]; got != want {
			t.Errorf("Recover(maxAttempts %d) cap = %v, want %d", in, got, want)
		}
	}
}

// TestLockKeyNamesTheSchema checks that the app-lock resource is built
// on the server from the effective schema and the engine's key, and
// hashed to sp_getapplock's 255 characters there.
func TestLockKeyNamesTheSchema(t *testing.T) {
	st := Dialect{}.Lock(".berth_sweep:q", false)
	for _, want := range []string{"N'berth:' + SCHEMA_NAME() + N':' + @p1", "IF DATALENGTH(@k) / 2 > 255", "@Resource = @res", "@res nvarchar(255)"} {
		if !strings.Contains(st.SQL, want) {
			t.Errorf("lock statement lacks %q:\n%s", want, st.SQL)
		}
	}
	if st.Args[0] != nv(".berth_sweep:q") {
		t.Errorf("lock arg = %#v", st.Args[0])
	}
	// 222 characters kept + ":" + 32 hex digits = sp_getapplock's 255.
	if !strings.Contains(st.SQL, "LEFT(@k, 222) + N':' + CONVERT(nvarchar(32)") || maxLockKey != 255 {
		t.Error("the hashed resource is not 222 + 1 + 32 = 255 characters")
	}
}

func TestSessionStateValidate(t *testing.T) {
	good := SessionState{IsolationLevel: 2, CompatibilityLevel: 150, AnsiNulls: 1, AnsiPadding: 1, AnsiWarnings: 1, ConcatNullYieldsNull: 1, QuotedIdentifier: 1}
	if err := good.Validate(); err != nil {
		t.Fatalf("good session: %v", err)
	}
	rr := good
	rr.IsolationLevel = 3
	if err := rr.Validate(); err != nil {
		t.Errorf("REPEATABLE READ: %v", err)
	}
	for _, c := range []struct {
		name   string
		mutate func(*SessionState)
		says   []string
	}{
		{"snapshot", func(s *SessionState) { s.IsolationLevel = 5 }, []string{"SNAPSHOT"}},
		{"serializable", func(s *SessionState) { s.IsolationLevel = 4 }, []string{"SERIALIZABLE"}},
		{"read uncommitted", func(s *SessionState) { s.IsolationLevel = 1 }, []string{"READ UNCOMMITTED"}},
		{"compat 120", func(s *SessionState) { s.CompatibilityLevel = 120 }, []string{"compatibility level is 120", "OPENJSON"}},
		{"quoted identifier off", func(s *SessionState) { s.QuotedIdentifier = 0 }, []string{"QUOTED_IDENTIFIER"}},
		{"numeric roundabort on", func(s *SessionState) { s.NumericRoundAbort = 1 }, []string{"NUMERIC_ROUNDABORT"}},
		{"everything at once", func(s *SessionState) {
			s.IsolationLevel, s.CompatibilityLevel, s.AnsiNulls, s.AnsiPadding = 5, 110, 0, 0
		}, []string{"SNAPSHOT", "compatibility level is 110", "ANSI_NULLS", "ANSI_PADDING"}},
	} {
		s := good
		c.mutate(&s)
		err := s.Validate()
		if !errors.Is(err, ErrUnsupportedSession) {
			t.Errorf("%s: err = %v, want ErrUnsupportedSession", c.name, err)
			continue
		}
		for _, w := range c.says {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not mention %q", c.name, err, w)
			}
		}
	}
}

func TestIsMissingTable(t *testing.T) {
	d := Dialect{}
	if !d.IsMissingTable(fmt.Errorf("claim: %w", mssql.Error{Number: 208, Message: "Invalid object name 'x'."})) {
		t.Error("error 208 not classified as a missing table")
	}
	if d.IsMissingTable(mssql.Error{Number: 1205}) || d.IsMissingTable(errors.New("208")) || d.IsMissingTable(nil) {
		t.Error("other errors classified as a missing table")
	}
}

func TestMessagingSystem(t *testing.T) {
	if got := sqlqueue.MessagingSystem(Dialect{}); got != MessagingSystem {
		t.Errorf("sqlqueue.MessagingSystem(Dialect{}) = %q, want %q", got, MessagingSystem)
	}
}

// The idle probe's text depends on the set of parked queues, not on the
// order they come in (the prober's come from a map): one text, one plan.
func TestMultiProbeTextIsStable(t *testing.T) {
	var qs []sqlqueue.Queue
	for i := range 12 {
		qs = append(qs, sqlqueue.QueueFor(Dialect{}, testTables, fmt.Sprintf("topic%02d", i), ""))
	}
	want := Dialect{}.MultiProbe(qs).SQL
	rev := slices.Clone(qs)
	slices.Reverse(rev)
	if got := (Dialect{}).MultiProbe(rev).SQL; got != want {
		t.Fatal("the probe's text changes with the order of its queues")
	}
	rot := append(slices.Clone(qs[5:]), qs[:5]...)
	if got := (Dialect{}).MultiProbe(rot).SQL; got != want {
		t.Fatal("the probe's text changes with the order of its queues")
	}
	for _, q := range qs {
		if !strings.Contains(want, "N'"+q.Name+"'") {
			t.Fatalf("%s is missing from the probe", q.Name)
		}
	}
}

// stateLiteral finds a comparison of the state column with a literal.
var stateLiteral = regexp.MustCompile(`\bstate\s*(=|<>|>|<|IN\s*\()\s*[0-9]`)

// Forced parameterization (PARAMETERIZATION FORCED on the database) would
// turn `state = 0` into a parameter, and the filtered indexes would no
// longer match; it skips every statement that references a variable or a
// client parameter. Every DML statement of the dialect that compares
// state with a literal must therefore reference one (docs/transports/
// sqlserver.md, Forced parameterization).
func TestStateFiltersEscapeForcedParameterization(t *testing.T) {
	checked := 0
	for name, sts := range allStatements() {
		for i, st := range sts {
			rest := st.SQL
			for rest != "" {
				end := statementEnd(rest)
				one := rest[:end]
				rest = strings.TrimPrefix(rest[end:], ";")
				upper := strings.ToUpper(one)
				if strings.Contains(upper, "CREATE ") || strings.Contains(upper, "ALTER ") {
					continue
				}
				if !stateLiteral.MatchString(one) {
					continue
				}
				checked++
				if !strings.Contains(one, "@") {
					t.Errorf("%s[%d]: compares state with a literal and references no variable or parameter, so forced parameterization would parameterize it:\n%s", name, i, strings.TrimSpace(one))
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d statements compare state with a literal: the check found too few to mean anything", checked)
	}
	t.Logf("%d statements compare state with a literal, each with a variable or parameter", checked)
}
