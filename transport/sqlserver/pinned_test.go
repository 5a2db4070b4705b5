package sqlserver

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/berth-go/berth/transport/sqlqueue"
)

// readCommitted is the line every batch Berth sends on its own account
// has after SET NOCOUNT ON (see Isolation).
const readCommitted = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n"

// The settlements seek the primary key once per ref, in a loop over the
// refs, and wait for a lock on their row rather than skip it; the sweeps
// seek their filtered index under UPDLOCK and pass locked rows (issue 37
// item 5).
func TestSettlementsAndSweepsPinned(t *testing.T) {
	d := Dialect{}
	q := testQueue
	settlements := map[string]sqlqueue.Stmt{
		"Begin":         d.Begin(q, testRefs, time.Second),
		"Complete":      d.Complete(q, testRefs),
		"CompleteInTx":  d.CompleteInTx(q, testRefs),
		"Renew":         d.Renew(q, testRefs, time.Second),
		"Retry":         d.Retry(q, []sqlqueue.RetryRef{{Ref: testRefs[0]}}),
		"Release":       d.Release(q, testRefs),
		"ReleaseDirect": d.ReleaseDirect(q, testRefs),
	}
	for name, st := range settlements {
		if !strings.Contains(st.SQL, "FROM "+q.Table+" AS q WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)\nINNER JOIN OPENJSON(@p1)") {
			t.Errorf("%s: the queue table is not pinned to a seek:\n%s", name, st.SQL)
		}
		if !strings.Contains(st.SQL, "\nOPTION (LOOP JOIN);\n") {
			t.Errorf("%s: no loop join over the refs:\n%s", name, st.SQL)
		}
		if strings.Contains(st.SQL, "READPAST") {
			t.Errorf("%s: READPAST would skip its own row while another session locks it (a false lease lost):\n%s", name, st.SQL)
		}
	}
	// The acks a claim carries are deleted as Complete deletes them, and
	// not skipped when locked: READPAST is the claim's pick and take's
	// alone.
	rider := d.ClaimComplete(q, 1, 10, 2, time.Minute, time.Second, testRefs).SQL
	if !strings.Contains(rider, "FROM "+q.Table+" AS q WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)\nINNER JOIN OPENJSON(@p6)") ||
		!strings.Contains(rider, "WHERE q.state = 2\nOPTION (LOOP JOIN);\n") {
		t.Errorf("ClaimComplete: its DELETE is not pinned as Complete's:\n%s", rider)
	}
	keyRider := d.ClaimKeys(q, 1, []string{"a"}, nil, 10, 2, time.Minute, time.Second, testRefs).SQL
	if !strings.Contains(keyRider, "FROM "+q.Table+" AS q WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)\nINNER JOIN OPENJSON(@p7)") ||
		!strings.Contains(keyRider, "WHERE q.state = 2\nOPTION (LOOP JOIN);\n") {
		t.Errorf("ClaimKeys: its DELETE is not pinned as Complete's:\n%s", keyRider)
	}
	sweeps := map[string]struct {
		st    sqlqueue.Stmt
		index string
	}{
		"Recover":           {d.Recover(q, 3, 10), q.Name + "_leased"},
		"DeadLetterExpired": {d.DeadLetterExpired(testNames, q, 3, "r", 10)[0], q.Name + "_leased"},
		"DropExpired":       {d.DropExpired(q, 10), q.Name + "_expiry"},
	}
	for name, c := range sweeps {
		want := "FROM " + q.Table + " AS q WITH (INDEX([" + c.index + "]), FORCESEEK, UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)\nWHERE "
		if !strings.Contains(c.st.SQL, want) {
			t.Errorf("%s: not pinned to a seek of %s:\n%s", name, c.index, c.st.SQL)
		}
	}
	// The stray predicate cannot seek, so its pin is a scan of the lease
	// index, in the other sweeps' form: DELETE TOP … FROM, not a DELETE
	// through a CTE, which Babelfish does not run (item 10).
	stray := d.DeadLetterStray(testNames, q, 10)[0].SQL
	if want := "DELETE TOP (@p1) q\n"; !strings.Contains(stray, want) ||
		!strings.Contains(stray, "FROM "+q.Table+" AS q WITH (INDEX(["+q.Name+"_leased]), UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)\nWHERE ") {
		t.Errorf("DeadLetterStray: not a DELETE TOP pinned to the lease index:\n%s", stray)
	}
}

// Every batch Berth sends on its own account sets READ COMMITTED, so that
// a pooled connection left at another level (on-premises SQL Server does
// not reset it) runs none of them there; the statements for a caller's
// transaction leave the caller's level alone (issue 37 item 6).
func TestOwnBatchesSetReadCommitted(t *testing.T) {
	d := Dialect{}
	n, q := testNames, testQueue
	rows := []sqlqueue.InsertRow{{UUID: "a", Headers: []byte(`{}`)}}
	own := map[string][]sqlqueue.Stmt{
		"Claim":             {d.Claim(q, 1, 10, time.Minute)},
		"ClaimDirect":       {d.ClaimDirect(q, 1, 10, 2, time.Minute, time.Second)},
		"ClaimComplete":     {d.ClaimComplete(q, 1, 10, 2, time.Minute, time.Second, testRefs)},
		"ClaimKeys":         {d.ClaimKeys(q, 1, []string{"a"}, nil, 10, 2, time.Minute, time.Second, nil), d.ClaimKeys(q, 1, []string{"a"}, nil, 10, 2, time.Minute, time.Second, testRefs)},
		"ReleaseDirect":     {d.ReleaseDirect(q, testRefs)},
		"MultiProbe":        {d.MultiProbe(probeQueues)},
		"Insert":            d.Insert(q, rows),
		"Begin":             {d.Begin(q, testRefs, time.Second)},
		"Complete":          {d.Complete(q, testRefs)},
		"Renew":             {d.Renew(q, testRefs, time.Second)},
		"Retry":             {d.Retry(q, []sqlqueue.RetryRef{{Ref: testRefs[0]}})},
		"Release":           {d.Release(q, testRefs)},
		"DeadLetter":        d.DeadLetter(n, q, testRefs[0], "r"),
		"Recover":           {d.Recover(q, 3, 10)},
		"DeadLetterExpired": d.DeadLetterExpired(n, q, 3, "r", 10),
		"DeadLetterStray":   d.DeadLetterStray(n, q, 10),
		"DropExpired":       {d.DropExpired(q, 10)},
		"PruneParked":       {d.PruneParked(n, q, time.Hour, 10)},
	}
	for name, sts := range own {
		for i, st := range sts {
			lines := strings.SplitAfter(st.SQL, "\n")
			if len(lines) < 2 || !strings.Contains(lines[1]+lines[2], readCommitted) {
				t.Errorf("%s[%d]: READ COMMITTED is not set at the batch's head:\n%s", name, i, st.SQL)
			}
		}
	}
	caller := map[string][]sqlqueue.Stmt{
		"InsertInTx":   d.InsertInTx(q, rows),
		"CompleteInTx": {d.CompleteInTx(q, testRefs)},
	}
	for name, sts := range caller {
		for i, st := range sts {
			if strings.Contains(st.SQL, "ISOLATION LEVEL") {
				t.Errorf("%s[%d]: changes the isolation level inside the caller's transaction:\n%s", name, i, st.SQL)
			}
		}
	}
	// Otherwise the same statements.
	if got, want := d.InsertInTx(q, rows)[0], d.Insert(q, rows)[0]; got.SQL != strings.Replace(want.SQL, readCommitted, "", 1) || !equalArgs(got.Args, want.Args) {
		t.Errorf("InsertInTx is not Insert without the isolation level:\n%s", got.SQL)
	}
	if got, want := d.CompleteInTx(q, testRefs), d.Complete(q, testRefs); got.SQL != strings.Replace(want.SQL, readCommitted, "", 1) || !equalArgs(got.Args, want.Args) {
		t.Errorf("CompleteInTx is not Complete without the isolation level:\n%s", got.SQL)
	}
}

func equalArgs(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Insert chunks by bytes as well as rows: large messages go a few to a
// statement (at most MaxInsertBytes of JSON each), one too large for a
// chunk goes alone, and every row is sent once, in order, with the keys
// locked by the first statement (issue 37 item 8).
func TestInsertChunksByBytes(t *testing.T) {
	d := Dialect{}
	body := bytes.Repeat([]byte{0xAB}, 1<<20) // 1 MiB: about 1.4 MB of JSON
	var rows []sqlqueue.InsertRow
	for i := range 10 {
		rows = append(rows, sqlqueue.InsertRow{UUID: string(rune('a' + i)), Headers: []byte(`{"<k>":"v"}`), Body: body, OrderingKey: "k"})
	}
	// One row larger than a chunk, between small ones.
	huge := bytes.Repeat([]byte{1}, MaxInsertBytes)
	rows = append(rows, sqlqueue.InsertRow{UUID: "huge", Body: huge}, sqlqueue.InsertRow{UUID: "small"})
	sts := d.Insert(testQueue, rows)
	if len(sts) < 4 {
		t.Fatalf("%d statements for 10 rows of 1 MiB and one of %d bytes; want them split by size", len(sts), len(huge))
	}
	var uuids []string
	for i, st := range sts {
		doc := string(st.Args[0].(mssql.NVarCharMax))
		var got []struct {
			N int    `json:"n"`
			U string `json:"u"`
		}
		if err := json.Unmarshal([]byte(doc), &got); err != nil {
			t.Fatalf("statement %d: %v", i, err)
		}
		if len(got) == 0 {
			t.Fatalf("statement %d carries no row", i)
		}
		if len(doc) > MaxInsertBytes && len(got) > 1 {
			t.Errorf("statement %d: %d bytes of JSON in %d rows, over MaxInsertBytes (%d)", i, len(doc), len(got), MaxInsertBytes)
		}
		for j, r := range got {
			if r.N != j+1 {
				t.Errorf("statement %d row %d numbered %d", i, j, r.N)
			}
			uuids = append(uuids, r.U)
		}
		keys := string(st.Args[1].(mssql.NVarCharMax))
		if want := map[bool]string{true: `["k"]`, false: `[]`}[i == 0]; keys != want {
			t.Errorf("statement %d locks keys %s, want %s", i, keys, want)
		}
	}
	if want := "a b c d e f g h i j huge small"; strings.Join(uuids, " ") != want {
		t.Errorf("rows sent %q, want %q", strings.Join(uuids, " "), want)
	}
}
