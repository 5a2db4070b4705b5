package sqlserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/sqlqueue"
)

// TestOneDeclarationListPerStatement sends every statement the dialect
// writes, for inputs of many sizes, through go-mssqldb to the fake TDS
// server, and checks that each statement reaches the server with one
// text and one parameter declaration list: the two halves of
// sp_executesql's plan-cache key. (go-mssqldb declares a plain string as
// nvarchar(<its length>) and a []byte as varbinary(<its length>), so a
// statement binding either gets a plan per length.)
func TestOneDeclarationListPerStatement(t *testing.T) {
	f, db := openFake(t)
	d := Dialect{}
	n, q := testNames, testQueue
	ctx := context.Background()

	var order []string
	send := func(name string, sts ...sqlqueue.Stmt) {
		t.Helper()
		for i, st := range sts {
			if _, err := db.ExecContext(ctx, st.SQL, st.Args...); err != nil {
				t.Fatalf("%s[%d]: %v", name, i, err)
			}
			order = append(order, fmt.Sprintf("%s[%d]", name, i))
		}
	}
	for size := range 12 {
		k := 1 << size // 1 … 2,048
		rows := make([]sqlqueue.InsertRow, 1+size%4)
		for i := range rows {
			rows[i] = sqlqueue.InsertRow{
				UUID:    strings.Repeat("u", 1+k%200),
				Headers: []byte(`{"k":"` + strings.Repeat("h", k) + `"}`),
				Body:    make([]byte, k*3),
				Delay:   time.Duration(k) * time.Millisecond,
				TTL:     time.Duration(size) * time.Hour,
			}
			if i%2 == 1 { // keyed and unkeyed rows share the text and declaration
				rows[i].OrderingKey = strings.Repeat("k", 1+k%255)
			}
		}
		refs := make([]sqlqueue.Ref, 1+k%300)
		retries := make([]sqlqueue.RetryRef, len(refs))
		for i := range refs {
			refs[i] = sqlqueue.Ref{ID: int64(i * k), Owner: int64(k)}
			retries[i] = sqlqueue.RetryRef{Ref: refs[i], Delay: time.Duration(i) * time.Second}
		}
		topic := strings.Repeat("t", 1+size)
		qq := sqlqueue.QueueFor(d, testTables, topic, strings.Repeat("g", size))
		send("Lock", d.Lock(strings.Repeat("k", k%300), size%2 == 0))
		send("Subscribe", d.Subscribe(n, qq))
		send("Subscriptions", d.Subscriptions(n, topic))
		send("Insert", d.Insert(q, rows)...)
		send("Claim", d.Claim(q, int64(k), k, time.Duration(k)*time.Second))
		send("ClaimDirect", d.ClaimDirect(q, int64(k), k, k/2, time.Duration(k)*time.Second, time.Minute))
		send("ClaimComplete", d.ClaimComplete(q, int64(k), k, k/3, time.Minute, time.Duration(k)*time.Second, refs))
		keys := make([]string, 1+k%40)
		for i := range keys {
			keys[i] = strings.Repeat("k", 1+(i*k)%255)
		}
		send("ClaimKeys", d.ClaimKeys(q, int64(k), keys, nil, k, k/2, time.Minute, time.Duration(k)*time.Second, nil))
		send("ClaimKeys riding", d.ClaimKeys(q, int64(k), keys, nil, k, k/3, time.Minute, time.Duration(k)*time.Second, refs))
		send("ReleaseDirect", d.ReleaseDirect(q, refs))
		send("Begin", d.Begin(q, refs, time.Duration(k)*time.Second))
		send("Complete", d.Complete(q, refs))
		send("Renew", d.Renew(q, refs, time.Minute))
		send("Retry", d.Retry(q, retries))
		send("Release", d.Release(q, refs))
		send("DeadLetter", d.DeadLetter(n, q, refs[0], strings.Repeat("r", k))...)
		send("Recover", d.Recover(q, size, k))
		send("DeadLetterExpired", d.DeadLetterExpired(n, q, 1+size, strings.Repeat("x", k), k)...)
		send("DropExpired", d.DropExpired(q, k))
		// The fleet's statements with arguments, with values of many
		// lengths and NULL times (sql.NullInt64 is a bigint either way).
		// FleetTables, DeleteStaleListeners, Listeners and PausedQueues
		// bind nothing: they reach the server as plain batches.
		row := testListener
		row.Instance, row.Name, row.Fault, row.Host = strings.Repeat("i", 1+k%120), topic, strings.Repeat("f", k), strings.Repeat("h", 1+size)
		if size%2 == 0 {
			row.FaultAt, row.LastReceive, row.StartedAt = time.Time{}, time.Time{}, time.Time{}
		}
		row.Latched, row.Faulted = size%2 == 0, size%3 == 0
		send("UpsertListener", d.UpsertListener(n, row))
		send("DeleteListeners", d.DeleteListeners(n, row.Instance))
		send("PauseQueue", d.PauseQueue(n, qq.Name, strings.Repeat("b", k%50)))
		send("ResumeQueue", d.ResumeQueue(n, qq.Name))
	}
	calls := f.Calls()
	if len(calls) != len(order) {
		t.Fatalf("%d calls reached the server, %d sent", len(calls), len(order))
	}
	keys := map[string]map[string]bool{}
	for i, c := range calls {
		name := order[i]
		if keys[name] == nil {
			keys[name] = map[string]bool{}
		}
		keys[name][c.Decls] = true
		if strings.Contains(c.Decls, "varbinary(") && !strings.Contains(c.Decls, "varbinary(max)") {
			t.Errorf("%s declares a sized varbinary: %s", name, c.Decls)
		}
	}
	for name, decls := range keys {
		if len(decls) != 1 {
			var list []string
			for dl := range decls {
				list = append(list, dl)
			}
			t.Errorf("%s reached the server with %d declaration lists, want 1: %q", name, len(decls), list)
		}
	}
	// Statement text: one per statement too, whatever the input size
	// (Subscribe and Insert name their queue in the text, so they are
	// checked for one queue).
	texts := map[string]map[string]bool{}
	for i, c := range calls {
		name := order[i]
		if strings.HasPrefix(name, "Subscribe[") || strings.HasPrefix(name, "Lock[") {
			continue
		}
		if texts[name] == nil {
			texts[name] = map[string]bool{}
		}
		texts[name][c.Stmt] = true
	}
	for name, ts := range texts {
		if len(ts) != 1 {
			t.Errorf("%s reached the server with %d texts, want 1", name, len(ts))
		}
	}
}
