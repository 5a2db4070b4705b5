package sqlserver

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/transport/sqlqueue"
)

// A schema lock that another session holds past LockTimeout fails the
// Publish that needed it (to create its topic's default queue) with
// LockTimeoutError, at once and once: the statement's wait is bounded
// (see goldenLock), the error is not transient, and the engine does not
// take a lock it was refused for granted.
func TestSchemaLockTimeoutFailsPublish(t *testing.T) {
	f, db := openFake(t)
	f.Answer(answerEngine)
	f.FailMatching("sp_getapplock", 1, LockTimeoutError,
		"berth: application lock berth:app:berth_schema not granted within 60000 ms (sp_getapplock returned -1; -1 is a timeout)")
	pub, err := sqlqueue.NewPublisher(Dialect{}, sqlqueue.PublisherConfig{DB: db}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	start := time.Now()
	err = pub.Publish("orders", newMessage())
	if !IsLockTimeout(err) {
		t.Fatalf("publish = %v, want LockTimeoutError", err)
	}
	if !strings.Contains(err.Error(), "schema lock") {
		t.Errorf("the error %q does not say which lock", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("publish failed after %v, want at once", took)
	}
	if n := count(f, "sp_getapplock"); n != 1 {
		t.Errorf("%d lock statements, want 1 (a lock timeout is not run again)", n)
	}
	if n := count(f, "CREATE TABLE"); n != 0 {
		t.Errorf("%d CREATE TABLE statements ran without the lock", n)
	}
}

// The waiting locks are bounded by LockTimeout and raise LockTimeoutError;
// the try-lock still answers 0 at once.
func TestLockWaitsAreBounded(t *testing.T) {
	d := Dialect{}
	for name, st := range map[string]sqlqueue.Stmt{"Lock": d.Lock("k", true), "SharedLock": d.SharedLock("k")} {
		if strings.Contains(st.SQL, "@LockTimeout = -1") || !strings.Contains(st.SQL, "@LockTimeout = 60000") {
			t.Errorf("%s waits without the bound:\n%s", name, st.SQL)
		}
		if !strings.Contains(st.SQL, "THROW 51222,") {
			t.Errorf("%s does not raise LockTimeoutError:\n%s", name, st.SQL)
		}
		if p := checkGrammar(st.SQL); len(p) > 0 {
			t.Errorf("%s: %v", name, p)
		}
	}
	if st := d.Lock("k", false); !strings.Contains(st.SQL, "@LockTimeout = 0;") || strings.Contains(st.SQL, "THROW") {
		t.Errorf("the try-lock changed:\n%s", st.SQL)
	}
}

// A database at schema version 2 with three subscribed queue tables is
// upgraded one table per transaction, each under the schema lock, before
// the version's own transaction (migrations 3 and 4, each finding nothing
// left to do): a table is schema-locked only while it upgrades, not while
// the others do.
func TestUpgradeOneTransactionPerTable(t *testing.T) {
	f, db := openFake(t)
	tables := []string{"berth_q_a", "berth_q_b", "berth_q_c"}
	f.Answer(func(text string) [][]any {
		switch {
		case strings.Contains(text, "COALESCE(MAX(version), 0)"):
			return [][]any{{int32(2)}}
		case strings.Contains(text, "SELECT DISTINCT queue_table"):
			var rows [][]any
			for _, n := range tables {
				rows = append(rows, []any{n})
			}
			return rows
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
	// The log, each request named by what it does.
	var got []string
	for _, e := range f.Log() {
		switch {
		case e == "BEGIN" || e == "COMMIT" || e == "ROLLBACK":
			got = append(got, e)
		case strings.Contains(e, "OPENJSON(@p1) WITH (n int"):
			// The publish's insert (whose key locks name sp_getapplock).
		case strings.Contains(e, "sp_getapplock"):
			got = append(got, "lock")
		case strings.Contains(e, "WHILE 1 = 1"):
			got = append(got, "upgrade every table")
		case strings.Contains(e, "INSERT INTO [berth_schema_version]"):
			got = append(got, "set version")
		default:
			for _, n := range tables {
				if strings.Contains(e, "@name nvarchar(128) = N'"+n+"'") {
					if !strings.Contains(e, "SET LOCK_TIMEOUT 5000;") {
						t.Errorf("the upgrade of %s sets no lock timeout", n)
					}
					got = append(got, "upgrade "+n)
				}
			}
		}
	}
	want := []string{
		"BEGIN", "lock", "upgrade berth_q_a", "COMMIT",
		"BEGIN", "lock", "upgrade berth_q_b", "COMMIT",
		"BEGIN", "lock", "upgrade berth_q_c", "COMMIT",
		"BEGIN", "lock", "upgrade every table", "upgrade every table", "set version", "COMMIT",
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("statements and transactions:\n got %q\nwant %q", got, want)
	}
}

// An upgrade that times out on a lock (1222: SET LOCK_TIMEOUT, or an
// online build's low-priority wait) rolls its table's transaction back and
// runs it again.
func TestUpgradeRunsAgainAfterALockTimeout(t *testing.T) {
	f, db := openFake(t)
	f.Answer(func(text string) [][]any {
		switch {
		case strings.Contains(text, "COALESCE(MAX(version), 0)"):
			return [][]any{{int32(2)}}
		case strings.Contains(text, "SELECT DISTINCT queue_table"):
			return [][]any{{"berth_q_a"}}
		case strings.Contains(text, "SELECT queue_table FROM"):
			return [][]any{{"berth_q_orders__billing"}}
		}
		return answerEngine(text)
	})
	f.FailMatching("@name nvarchar(128) = N'berth_q_a'", 2, 1222, "Lock request time out period exceeded.")
	pub, err := sqlqueue.NewPublisher(Dialect{}, sqlqueue.PublisherConfig{DB: db}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish("orders", newMessage()); err != nil {
		t.Fatal(err)
	}
	runs, rollbacks := 0, 0
	for _, e := range f.Log() {
		if strings.Contains(e, "@name nvarchar(128) = N'berth_q_a'") {
			runs++
		}
		if e == "ROLLBACK" {
			rollbacks++
		}
	}
	if runs != 3 {
		t.Errorf("the upgrade ran %d times, want 3", runs)
	}
	if rollbacks != 2 {
		t.Errorf("%d rollbacks, want 2", rollbacks)
	}
}

// Online index builds wait at low priority where the server has it, and
// give up after a minute.
func TestUpgradeBuildsAtLowPriority(t *testing.T) {
	sql := Dialect{}.MigrateQueue(testQueue)[0].SQL
	for _, want := range []string{
		"SET LOCK_TIMEOUT 5000;",
		"ONLINE = ON (WAIT_AT_LOW_PRIORITY (MAX_DURATION = 1 MINUTES, ABORT_AFTER_WAIT = SELF))",
		"COALESCE(N' WITH (' + @online + N')', N'')",
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("the upgrade lacks %q", want)
		}
	}
	if p := checkGrammar(sql); len(p) > 0 {
		t.Error(p)
	}
}

// Every index guard finds its index by name through INDEXPROPERTY, one
// form for every guard, never by comparing sys.indexes.name. (It was meant
// to make the DDL idempotent on Babelfish, which lists an index there
// under a mangled name; it does not: Babelfish 4.3's INDEXPROPERTY compares
// that mangled name too, see docs/transports/sqlserver.md.)
func TestIndexGuardsFindIndexesByProperty(t *testing.T) {
	d := Dialect{}
	var sts []sqlqueue.Stmt
	for _, m := range d.Migrations(testNames) {
		sts = append(sts, m.Stmts...)
	}
	sts = append(sts, d.CreateQueue(testQueue)...)
	byName := regexp.MustCompile(`(?s)sys\.indexes[^;]*?\bname\s*=`)
	guards := 0
	for _, st := range sts {
		if loc := byName.FindStringIndex(st.SQL); loc != nil {
			t.Errorf("a guard compares sys.indexes.name: %q in\n%s", st.SQL[loc[0]:loc[1]], st.SQL)
		}
		guards += strings.Count(st.SQL, "'IndexID')")
	}
	// The errors index, the pending and lease indexes of CreateQueue, and
	// upgradeQueue's six (in migration 2 and in CreateQueue): none was lost.
	if guards < 9 {
		t.Errorf("%d INDEXPROPERTY guards, want at least 9", guards)
	}
}
