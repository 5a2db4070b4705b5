package sqlserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	mssql "github.com/microsoft/go-mssqldb"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// What the fake answers for the engine: a supported session, the latest
// schema version, and one row (id 7) for a claim, the lease gate and an ack.
const (
	completeMark = "DELETE q\nOUTPUT deleted.id"
	beginMark    = "UPDATE q SET state = 2"
	claimMark    = "UPDATE q SET state = 1, owner = @p2"
	insertMark   = "INSERT INTO "
)

func answerEngine(text string) [][]any {
	switch {
	case strings.Contains(text, "sys.dm_exec_sessions"):
		return [][]any{{int32(2), int32(150), int32(1), int32(1), int32(1), int32(1), int32(1), int32(0)}}
	case strings.Contains(text, "sp_getapplock"):
		return [][]any{{int32(1)}}
	case strings.Contains(text, "COALESCE(MAX(version), 0)"):
		return [][]any{{int32(4)}}
	case strings.Contains(text, claimMark):
		return [][]any{{int64(7), "u-7", []byte(`{}`), []byte("body"), int32(0)}}
	case strings.Contains(text, beginMark):
		return [][]any{{int64(7), int32(1)}}
	case strings.Contains(text, completeMark):
		return [][]any{{int64(7)}}
	}
	return nil
}

// fakeSource opens a source on the fake, the schema managed by hand (the
// fake runs no DDL), with the row it claimed already through the lease
// gate.
func fakeSource(t *testing.T, timeout time.Duration) (*fakeTDS, *sqlqueue.Source, *transport.Delivery) {
	t.Helper()
	f, db := openFake(t)
	f.Answer(answerEngine)
	cfg := sqlqueue.SubscriberConfig{DB: db, Tables: sqlqueue.Tables{ManualSchema: true},
		ConsumerGroup: "billing", SweepInterval: -1, StatementTimeout: timeout}
	src, err := sqlqueue.NewSource(t.Context(), Dialect{}, cfg, "orders", watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	ds, err := src.Claim(t.Context(), 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %d rows, %v", len(ds), err)
	}
	if err := src.Begin(t.Context(), ds[0]); err != nil {
		t.Fatal(err)
	}
	return f, src, ds[0]
}

// count returns how many requests whose text contains mark reached the fake.
func count(f *fakeTDS, mark string) int {
	n := 0
	for _, c := range f.Calls() {
		if strings.Contains(c.Stmt, mark) {
			n++
		}
	}
	return n
}

// An ack in flight during a fail-over lands once the database is back: the
// fake answers 40613 twice, and the engine waits the outage policy's
// seconds (1 s, then 2 s, each jittered to between half and all of it)
// rather than giving up within 100 ms, when the message would be
// redelivered at lease expiry.
func TestCompleteOutlastsAFailover(t *testing.T) {
	f, src, d := fakeSource(t, 30*time.Second)
	f.FailMatching(completeMark, 2, 40613, "Database 'test' on server 'faketds' is not currently available. Please retry the connection later.")
	start := time.Now()
	if err := src.Complete(t.Context(), d); err != nil {
		t.Fatalf("complete after a fail-over: %v", err)
	}
	took := time.Since(start)
	if n := count(f, completeMark); n != 3 {
		t.Errorf("the ack ran %d times, want 3 (two refused, one landed)", n)
	}
	if took < 1500*time.Millisecond {
		t.Errorf("the ack landed after %v; the outage waits add up to at least 1.5 s", took)
	}
	if took > 6*time.Second {
		t.Errorf("the ack landed after %v; the outage waits add up to at most 3 s", took)
	}
}

// A deadlock victim is no outage: it runs again within milliseconds, and at
// most three times more.
func TestCompleteRetriesADeadlockAtOnce(t *testing.T) {
	f, src, d := fakeSource(t, 30*time.Second)
	f.FailMatching(completeMark, 3, 1205, "Transaction was deadlocked and has been chosen as the deadlock victim.")
	start := time.Now()
	if err := src.Complete(t.Context(), d); err != nil {
		t.Fatalf("complete after three deadlocks: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the ack landed after %v; three deadlock waits add up to at most 70 ms", took)
	}
	if n := count(f, completeMark); n != 4 {
		t.Errorf("the ack ran %d times, want 4", n)
	}

	// A fourth deadlock in a row is returned.
	f, src, d = fakeSource(t, 30*time.Second)
	f.FailMatching(completeMark, 4, 1205, "deadlock victim")
	err := src.Complete(t.Context(), d)
	var me mssql.Error
	if !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("complete after four deadlocks = %v, want mssql.Error 1205", err)
	}
}

// A fail-over that outlasts the statement's deadline (StatementTimeout)
// fails the ack when the deadline passes, and not before.
func TestCompleteOutageEndsAtTheDeadline(t *testing.T) {
	const timeout = 2500 * time.Millisecond
	f, src, d := fakeSource(t, timeout)
	f.FailMatching(completeMark, 1000, 40501, "The service is currently busy. Retry the request after 10 seconds.")
	start := time.Now()
	err := src.Complete(t.Context(), d)
	took := time.Since(start)
	var me mssql.Error
	if !errors.As(err, &me) || me.Number != 40501 {
		t.Fatalf("complete = %v, want mssql.Error 40501", err)
	}
	if took < timeout-100*time.Millisecond || took > timeout+time.Second {
		t.Errorf("the ack failed after %v, want at its deadline (%v)", took, timeout)
	}
	// Runs at 0 and after 0.5–1 s, perhaps after another 1–2 s: seconds
	// apart, not three within 70 ms.
	if n := count(f, completeMark); n < 2 || n > 3 {
		t.Errorf("the ack ran %d times, want 2 or 3", n)
	}
}

// A Publish during a fail-over inserts once the database is back. (Its
// context has no deadline — Publish drops the message context's — so an
// outage that lasts returns its error after a minute of waits; the unit
// tests of the backoff show that bound.)
func TestPublishOutlastsAFailover(t *testing.T) {
	f, db := openFake(t)
	// The topic has one subscribed queue, so the insert is one statement.
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
	f.FailMatching(insertMark, 1, 40613, "Database 'test' is not currently available.")
	start := time.Now()
	if err := pub.Publish("orders", newMessage()); err != nil {
		t.Fatalf("publish after a fail-over: %v", err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("published after %v; the outage wait is at least 0.5 s", took)
	}
	if n := count(f, insertMark); n != 2 {
		t.Errorf("the insert ran %d times, want 2", n)
	}

}

func newMessage() *message.Message { return message.NewMessage(watermill.NewUUID(), []byte("x")) }
