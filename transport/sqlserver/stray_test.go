package sqlserver

import (
	"reflect"
	"strings"
	"testing"

	"github.com/berth-go/berth/transport/sqlqueue"
)

// goldenDeadLetterStray is the exact text of DeadLetterStray for the
// tables of testTables and the queue of topic "orders", group "billing".
// Kept here rather than in golden_test.go; review changes against the
// notes in docs/transports/sqlserver.md all the same.
const goldenDeadLetterStray = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
SET XACT_ABORT ON;
DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NOT NULL, body varbinary(max) NOT NULL, attempts int NOT NULL, created_at datetime2(3) NOT NULL, state tinyint NOT NULL, lease_until datetime2(3) NULL);
BEGIN TRANSACTION;
DELETE TOP (@p1) q
OUTPUT deleted.id, deleted.uuid, deleted.headers, deleted.body, deleted.attempts, deleted.created_at, deleted.state, deleted.lease_until INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (INDEX([berth_q_orders__billing_leased]), UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
WHERE q.state > 0 AND (q.lease_until IS NULL OR q.owner IS NULL OR q.state > 2);
INSERT INTO [app].[berth_errors] (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at, failed_at)
SELECT @p2, uuid, headers, body, attempts, CASE WHEN state > 2 THEN CONCAT(N'stray row: state ', state, N' is not a known state') WHEN lease_until IS NULL THEN CONCAT(N'stray row: state ', state, N' with no lease') ELSE CONCAT(N'stray row: state ', state, N' with no owner') END, id, created_at, @now FROM @t ORDER BY id;
COMMIT TRANSACTION;
SELECT id FROM @t;`

// TestDeadLetterStrayGolden pins the text and arguments of the stray
// statement. Its predicate starts with the lease index's filter
// (state > 0), literally, so the filtered index it names qualifies.
func TestDeadLetterStrayGolden(t *testing.T) {
	got := Dialect{}.DeadLetterStray(testNames, testQueue, 1000)
	if len(got) != 1 {
		t.Fatalf("got %d statements, want 1", len(got))
	}
	if got[0].SQL != goldenDeadLetterStray {
		t.Errorf("text changed:\n--- got\n%s\n--- want\n%s", got[0].SQL, goldenDeadLetterStray)
	}
	if want := []any{int64(1000), nv("berth_q_orders__billing")}; !reflect.DeepEqual(got[0].Args, want) {
		t.Errorf("args = %#v, want %#v", got[0].Args, want)
	}
}

// The stray statement declares its parameters whatever the limit and the
// queue name's length (go-mssqldb would declare a plain string
// nvarchar(<its length>): a plan per length), checked on what reaches the
// server (the fake).
func TestDeadLetterStrayDeclarations(t *testing.T) {
	f, db := openFake(t)
	d := Dialect{}
	for size := range 8 {
		q := sqlqueue.QueueFor(d, testTables, strings.Repeat("t", 1+size*9), "")
		for _, st := range d.DeadLetterStray(testNames, q, 1<<size) {
			if _, err := db.ExecContext(t.Context(), st.SQL, st.Args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	calls := f.Calls()
	if len(calls) != 8 {
		t.Fatalf("%d calls reached the server, want 8", len(calls))
	}
	for _, c := range calls {
		if c.Decls != "@p1 bigint,@p2 nvarchar(max)" {
			t.Errorf("declarations %q, want @p1 bigint,@p2 nvarchar(max)", c.Decls)
		}
	}
}
