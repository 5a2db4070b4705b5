package sqlserver

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The claim, as the engine sends it: no key-range lock anywhere in its
// batch (no HOLDLOCK, no SERIALIZABLE), DEADLOCK_PRIORITY LOW before its
// first statement that reads the queue, and the rows it passes over read
// without UPDLOCK (the pick), the rows it takes locked by the take alone,
// by id. Before issue 37 items 2 and 3 the claim was one UPDATE of a CTE
// whose key probe was HOLDLOCK and whose scan held UPDLOCK on every row
// it read.
func TestClaimTakesNoRangeLocksAndYields(t *testing.T) {
	f, db := openFake(t)
	f.Answer(answerEngine)
	src, err := sqlqueue.NewSource(t.Context(), Dialect{}, sqlqueue.SubscriberConfig{DB: db, Tables: sqlqueue.Tables{ManualSchema: true},
		ConsumerGroup: "billing", SweepInterval: -1}, "orders", watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(t.Context()) })
	if _, err := src.Claim(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	var claim string
	for _, e := range f.Log() {
		if strings.Contains(e, claimMark) {
			claim = e
		}
	}
	if claim == "" {
		t.Fatal("no claim reached the server")
	}
	for _, bad := range []string{"HOLDLOCK", "SERIALIZABLE", "REPEATABLEREAD", "TABLOCK", "UPDLOCK"} {
		if strings.Contains(strings.ToUpper(claim), bad) {
			t.Errorf("the claim batch takes %s:\n%s", bad, claim)
		}
	}
	low := strings.Index(claim, "SET DEADLOCK_PRIORITY LOW;")
	first := strings.Index(claim, "FROM [berth_q_orders__billing]")
	if low < 0 || first < 0 || low > first {
		t.Errorf("DEADLOCK_PRIORITY LOW is not set before the claim reads its queue:\n%s", claim)
	}
	if !strings.HasPrefix(claim, "SET NOCOUNT ON;\nSET DEADLOCK_PRIORITY LOW;\n") {
		t.Errorf("the claim's head changed:\n%s", claim)
	}
	// The pick fills @c; the take updates the queue joined to @c, skipping
	// rows another claim holds, and checks the row is still pending and due.
	pick := regexp.MustCompile(`INSERT INTO @c \(id\)\nSELECT TOP \(@p1\) p\.id\nFROM \[berth_q_orders__billing\] AS p WITH \(INDEX\(\[berth_q_orders__billing_pending\]\), FORCESEEK, READPAST, ROWLOCK, READCOMMITTEDLOCK\)`)
	if !pick.MatchString(claim) {
		t.Errorf("the pick is not a lock-free seek of the pending index:\n%s", claim)
	}
	for _, want := range []string{
		"FROM [berth_q_orders__billing] AS q WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)\nINNER JOIN @c AS c ON q.id = c.id\nWHERE q.state = 0 AND q.due_at <= @now",
		// The key probes: locking reads that wait, never skip.
		"AS e WITH (INDEX([berth_q_orders__billing_key]), FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)",
		"AS f WITH (INDEX([berth_q_orders__billing_inflight]), FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)",
	} {
		if !strings.Contains(claim, want) {
			t.Errorf("the claim lacks %q:\n%s", want, claim)
		}
	}
	if p := checkGrammar(claim); len(p) > 0 {
		t.Error(p)
	}
}

// keyedMessage is a message with ordering key key ("" for none).
func keyedMessage(key string) *message.Message {
	m := newMessage()
	if key != "" {
		m.Metadata.Set(transport.MetadataOrderingKey, key)
	}
	return m
}

// insertCalls publishes msgs to "orders" (one subscribed queue) on the
// fake and returns the insert calls and the log.
func insertCalls(t *testing.T, msgs ...*message.Message) ([]rpcCall, []string) {
	t.Helper()
	f, db := openFake(t)
	f.Answer(func(text string) [][]any {
		if strings.Contains(text, "SELECT queue_table FROM") {
			return [][]any{{"berth_q_orders__billing"}}
		}
		return answerEngine(text)
	})
	pub, err := sqlqueue.NewPublisher(Dialect{}, sqlqueue.PublisherConfig{DB: db, Tables: sqlqueue.Tables{ManualSchema: true}}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish("orders", msgs...); err != nil {
		t.Fatal(err)
	}
	var calls []rpcCall
	for _, c := range f.Calls() {
		if strings.Contains(c.Stmt, "INSERT INTO [berth_q_orders__billing]") {
			calls = append(calls, c)
		}
	}
	return calls, f.Log()
}

// A keyed publish takes one application lock per distinct key of its
// queue, owned by the transaction, in key order, before the INSERT draws
// an id — PostgreSQL's advisory lock, which makes a key's ids follow
// commit order (see Claim). A publish of one statement opens the
// transaction itself. Before issue 37 item 2 the insert took no lock.
func TestKeyedInsertLocksKeysInOrder(t *testing.T) {
	calls, _ := insertCalls(t, keyedMessage("b"), keyedMessage(""), keyedMessage("a"), keyedMessage("b"), keyedMessage("B"))
	if len(calls) != 1 {
		t.Fatalf("%d insert calls, want 1", len(calls))
	}
	c := calls[0]
	if len(c.Args) != 2 || c.Args[1] != `["B","a","b"]` {
		t.Fatalf("insert keys = %#v, want the distinct keys in order", c.Args)
	}
	text := c.Stmt
	order := []string{
		"DECLARE @keys TABLE (k nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);",
		"SELECT DISTINCT j.k COLLATE Latin1_General_100_BIN2 FROM OPENJSON(@p2)",
		"IF @@TRANCOUNT = 0 AND EXISTS (SELECT 1 FROM @keys)",
		"BEGIN TRANSACTION;",
		"SELECT TOP (1) @next = k FROM @keys WHERE @prev IS NULL OR k > @prev ORDER BY k;",
		"HASHBYTES('SHA2_256', @next)",
		"EXEC @r = sp_getapplock @Resource = @res, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = 60000;",
		"THROW 51222, @m, 1;",
		"SET @prev = @next;",
		"INSERT INTO [berth_q_orders__billing] (uuid",
		"IF @own = 1 COMMIT TRANSACTION;",
		"BEGIN CATCH\n\tIF @own = 1 AND @@TRANCOUNT > 0 ROLLBACK TRANSACTION;\n\tTHROW;",
	}
	at := 0
	for _, want := range order {
		i := strings.Index(text[at:], want)
		if i < 0 {
			t.Fatalf("the insert lacks %q after offset %d:\n%s", want, at, text)
		}
		at += i + len(want)
	}
	if p := checkGrammar(text); len(p) > 0 {
		t.Error(p)
	}
	// An unkeyed publish sends the same text with no key: no lock, no
	// transaction of its own.
	plain, _ := insertCalls(t, keyedMessage(""))
	if len(plain) != 1 || plain[0].Stmt != text || plain[0].Args[1] != "[]" {
		t.Errorf("the unkeyed insert = %#v", plain)
	}
}

// A keyed publish over several statements takes every key in its first
// statement, in one ascending pass, and the later statements none, all in
// one transaction: two publishes of overlapping keys never lock them in
// opposite orders.
func TestKeyedInsertOverSeveralStatements(t *testing.T) {
	msgs := make([]*message.Message, 2*MaxRowsPerInsert+1)
	for i := range msgs {
		msgs[i] = keyedMessage(fmt.Sprintf("k%04d", len(msgs)-i)) // descending
	}
	calls, log := insertCalls(t, msgs...)
	if len(calls) != 3 {
		t.Fatalf("%d insert calls, want 3", len(calls))
	}
	keys, _ := calls[0].Args[1].(string)
	if !strings.HasPrefix(keys, `["k0001","k0002",`) || strings.Count(keys, ",") != len(msgs)-1 {
		t.Errorf("the first statement locks %.60s…, want every key, ascending", keys)
	}
	for i, c := range calls[1:] {
		if c.Args[1] != "[]" {
			t.Errorf("statement %d locks keys again: %.60s", i+2, c.Args[1])
		}
	}
	var tx []string
	for _, e := range log {
		switch {
		case e == "BEGIN" || e == "COMMIT" || e == "ROLLBACK":
			tx = append(tx, e)
		case strings.Contains(e, "INSERT INTO [berth_q_orders__billing]"):
			tx = append(tx, "insert")
		}
	}
	if got := strings.Join(tx, " "); got != "BEGIN insert insert insert COMMIT" {
		t.Errorf("transactions: %s", got)
	}
}

// A key lock not granted (another transaction publishing the key holds it
// past LockTimeout) fails the publish with LockTimeoutError, once: it is
// not a transient error.
func TestKeyLockTimeoutFailsPublish(t *testing.T) {
	f, db := openFake(t)
	f.Answer(func(text string) [][]any {
		if strings.Contains(text, "SELECT queue_table FROM") {
			return [][]any{{"berth_q_orders__billing"}}
		}
		return answerEngine(text)
	})
	f.FailMatching("INSERT INTO [berth_q_orders__billing]", 1, LockTimeoutError, "berth: ordering key lock berth:key:1:AB not granted within 60000 ms (sp_getapplock returned -1; -1 is a timeout, -3 a deadlock victim)")
	pub, err := sqlqueue.NewPublisher(Dialect{}, sqlqueue.PublisherConfig{DB: db, Tables: sqlqueue.Tables{ManualSchema: true}}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	err = pub.Publish("orders", keyedMessage("a"))
	if !IsLockTimeout(err) {
		t.Fatalf("publish = %v, want LockTimeoutError", err)
	}
	if n := count(f, "INSERT INTO [berth_q_orders__billing]"); n != 1 {
		t.Errorf("the insert ran %d times, want 1", n)
	}
}

// Queue tables have lock escalation disabled: a new table as it is made,
// an existing one by the upgrade that every CreateQueue and schema
// version 4 run. Before issue 37 item 3 neither said LOCK_ESCALATION.
func TestQueueTablesDisableLockEscalation(t *testing.T) {
	d := Dialect{}
	create := d.CreateQueue(testQueue)[0].SQL
	if !strings.Contains(create, "IF OBJECT_ID(N'[app].[berth_q_orders__billing]', N'U') IS NULL\nBEGIN\nCREATE TABLE [app].[berth_q_orders__billing] (") ||
		!strings.Contains(create, ");\nALTER TABLE [app].[berth_q_orders__billing] SET (LOCK_ESCALATION = DISABLE);\nEND") {
		t.Errorf("the create DDL does not disable lock escalation:\n%s", create)
	}
	const upgrade = `	IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(@t) AND lock_escalation <> 1)
	BEGIN
		SET @sql = N'ALTER TABLE ' + @t + N' SET (LOCK_ESCALATION = DISABLE)';
		EXEC sp_executesql @sql;
	END;`
	if !strings.Contains(d.MigrateQueue(testQueue)[0].SQL, upgrade) {
		t.Error("MigrateQueue does not disable lock escalation")
	}
	ms := d.Migrations(testNames)
	last := ms[len(ms)-1]
	if last.Version != 4 || len(last.Stmts) != 1 || !strings.Contains(last.Stmts[0].SQL, upgrade) {
		t.Errorf("schema version %d does not disable lock escalation on every queue table", last.Version)
	}
	for _, st := range append(d.CreateQueue(testQueue), last.Stmts...) {
		if p := checkGrammar(st.SQL); len(p) > 0 {
			t.Error(p)
		}
	}
}

// A database at schema version 3 upgrades each subscribed queue table in
// a transaction of its own (the QueueMigrator hook), disabling its lock
// escalation, then records version 4.
func TestUpgradeToVersion4PerTable(t *testing.T) {
	f, db := openFake(t)
	f.Answer(func(text string) [][]any {
		switch {
		case strings.Contains(text, "COALESCE(MAX(version), 0)"):
			return [][]any{{int32(3)}}
		case strings.Contains(text, "SELECT DISTINCT queue_table"):
			return [][]any{{"berth_q_a"}, {"berth_q_b"}}
		case strings.Contains(text, "SELECT queue_table FROM"):
			return [][]any{{"berth_q_orders__billing"}}
		}
		return answerEngine(text)
	})
	pub, err := sqlqueue.NewPublisher(Dialect{}, sqlqueue.PublisherConfig{DB: db}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish("orders", newMessage()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range f.Log() {
		switch {
		case e == "BEGIN" || e == "COMMIT":
			got = append(got, e)
		case strings.Contains(e, "WHILE 1 = 1") && strings.Contains(e, "LOCK_ESCALATION = DISABLE"):
			got = append(got, "upgrade every table")
		case strings.Contains(e, "INSERT INTO [berth_schema_version] (version) VALUES (4)"):
			got = append(got, "set version 4")
		default:
			for _, n := range []string{"berth_q_a", "berth_q_b"} {
				if strings.Contains(e, "@name nvarchar(128) = N'"+n+"'") && strings.Contains(e, "LOCK_ESCALATION = DISABLE") {
					got = append(got, "upgrade "+n)
				}
			}
		}
	}
	want := "BEGIN upgrade berth_q_a COMMIT BEGIN upgrade berth_q_b COMMIT BEGIN upgrade every table set version 4 COMMIT"
	if g := strings.Join(got, " "); g != want {
		t.Errorf("upgrade:\n got %s\nwant %s", g, want)
	}
}
