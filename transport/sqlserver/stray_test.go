package sqlserver

import (
	"reflect"
	"testing"
)

// goldenDeadLetterStray is the exact text of DeadLetterStray for the
// tables of testTables and the queue of topic "orders", group "billing".
// Kept here rather than in golden_test.go; review changes against the
// notes in docs/transports/sqlserver.md all the same.
const goldenDeadLetterStray = `SET NOCOUNT ON;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
SET XACT_ABORT ON;
DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NOT NULL, body varbinary(max) NOT NULL, attempts int NOT NULL, created_at datetime2(3) NOT NULL, state tinyint NOT NULL);
BEGIN TRANSACTION;
DELETE TOP (@p1) FROM [app].[berth_q_orders__billing] WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
OUTPUT deleted.id, deleted.uuid, deleted.headers, deleted.body, deleted.attempts, deleted.created_at, deleted.state INTO @t
WHERE state > 0 AND (lease_until IS NULL OR state > 2);
INSERT INTO [app].[berth_errors] (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at, failed_at)
SELECT @p2, uuid, headers, body, attempts, CASE WHEN state > 2 THEN CONCAT(N'stray row: state ', state, N' is not a known state') ELSE CONCAT(N'stray row: state ', state, N' with no lease') END, id, created_at, @now FROM @t ORDER BY id;
COMMIT TRANSACTION;
SELECT id FROM @t;`

// TestDeadLetterStrayGolden pins the text and arguments of the stray
// statement. Its predicate starts with the lease index's filter
// (state > 0), literally, so the filtered index can serve it.
func TestDeadLetterStrayGolden(t *testing.T) {
	got := Dialect{}.DeadLetterStray(testNames, testQueue, 1000)
	if len(got) != 1 {
		t.Fatalf("got %d statements, want 1", len(got))
	}
	if got[0].SQL != goldenDeadLetterStray {
		t.Errorf("text changed:\n--- got\n%s\n--- want\n%s", got[0].SQL, goldenDeadLetterStray)
	}
	if want := []any{int64(1000), "berth_q_orders__billing"}; !reflect.DeepEqual(got[0].Args, want) {
		t.Errorf("args = %#v, want %#v", got[0].Args, want)
	}
}
