package sqlserver

import (
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
