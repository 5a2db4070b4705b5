package sqlserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// sweepStep names a request of a sweep by what it does ("" for none).
func sweepStep(text string) string {
	switch {
	case text == "BEGIN" || text == "COMMIT" || text == "ROLLBACK":
		return text
	case strings.Contains(text, "sp_getapplock"):
		return "lock"
	case strings.Contains(text, "N'stray row: state '"):
		return "stray"
	case strings.Contains(text, "UPDATE TOP (@p1) q SET state = 0"):
		return "recover"
	case strings.Contains(text, "q.attempts >= @p2"):
		return "dead-letter expired"
	case strings.Contains(text, "q.expires_at <= @now"):
		return "drop expired"
	}
	return ""
}

// Each statement of a sweep commits in a transaction of its own, which
// takes the sweep lock first: the rows one statement locks are not held
// while the next ones run (issue 37 item 5).
func TestSweepStatementsEachInOwnTransaction(t *testing.T) {
	f, db := openFake(t)
	f.Answer(answerEngine)
	cfg := sqlqueue.SubscriberConfig{DB: db, Tables: sqlqueue.Tables{ManualSchema: true},
		ConsumerGroup: "billing", SweepInterval: -1, StatementTimeout: 10 * time.Second}
	cfg.Pipeline.MaxAttempts = 5
	src, err := sqlqueue.NewSource(t.Context(), Dialect{}, cfg, "orders", watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	before := len(f.Log())
	res, err := src.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Ran {
		t.Fatal("the sweep did not run")
	}
	var got []string
	for _, e := range f.Log()[before:] {
		if s := sweepStep(e); s != "" {
			got = append(got, s)
		}
	}
	want := []string{
		"BEGIN", "lock", "stray", "COMMIT",
		"BEGIN", "lock", "recover", "COMMIT",
		"BEGIN", "lock", "dead-letter expired", "COMMIT",
		"BEGIN", "lock", "drop expired", "COMMIT",
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("the sweep's requests:\n got %q\nwant %q", got, want)
	}
}

// When another instance holds the sweep lock, the sweep stops at the step
// it could not lock, having run none of it.
func TestSweepStopsWhenTheLockIsHeld(t *testing.T) {
	f, db := openFake(t)
	locks := 0
	f.Answer(func(text string) [][]any {
		if strings.Contains(text, "sp_getapplock") && strings.Contains(text, "@LockTimeout = 0;") {
			locks++
			if locks > 1 { // the first step's lock, then held elsewhere
				return [][]any{{int32(0)}}
			}
		}
		return answerEngine(text)
	})
	cfg := sqlqueue.SubscriberConfig{DB: db, Tables: sqlqueue.Tables{ManualSchema: true},
		ConsumerGroup: "billing", SweepInterval: -1, StatementTimeout: 10 * time.Second}
	src, err := sqlqueue.NewSource(t.Context(), Dialect{}, cfg, "orders", watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	before := len(f.Log())
	if _, err := src.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range f.Log()[before:] {
		if s := sweepStep(e); s != "" && s != "BEGIN" && s != "COMMIT" {
			got = append(got, s)
		}
	}
	if want := "lock, stray, lock"; strings.Join(got, ", ") != want {
		t.Errorf("the sweep's statements: %q, want %s", got, want)
	}
}

// isolationSet reports whether a request sets READ COMMITTED.
func isolationSet(text string) bool { return strings.Contains(text, "\n"+readCommitted) }

// Berth's own batches set READ COMMITTED: the claim, the lease gate, the
// batched ack and a Publish's insert; those inside a caller's transaction
// — an insert of WithTx and the ack that commits the handler's
// transaction — do not (issue 37 item 6).
func TestIsolationSetInOwnBatchesOnly(t *testing.T) {
	f, db := openFake(t)
	f.Answer(func(text string) [][]any {
		if strings.Contains(text, "SELECT queue_table FROM") {
			return [][]any{{"berth_q_orders__billing"}}
		}
		return answerEngine(text)
	})
	ctx := t.Context()
	cfg := sqlqueue.SubscriberConfig{DB: db, Tables: sqlqueue.Tables{ManualSchema: true},
		ConsumerGroup: "billing", SweepInterval: -1, StatementTimeout: 10 * time.Second}
	src, err := sqlqueue.NewSource(ctx, Dialect{}, cfg, "orders", watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	claim := func() *transport.Delivery {
		t.Helper()
		ds, err := src.Claim(ctx, 1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim: %d rows, %v", len(ds), err)
		}
		if err := src.Begin(ctx, ds[0]); err != nil {
			t.Fatal(err)
		}
		return ds[0]
	}
	pub, err := sqlqueue.NewPublisher(Dialect{}, sqlqueue.PublisherConfig{DB: db, Tables: sqlqueue.Tables{ManualSchema: true}}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	// Berth's own: a claim, the lease gate, a publish, a batched ack.
	if err := src.Complete(ctx, claim()); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("orders", newMessage()); err != nil {
		t.Fatal(err)
	}
	own := len(f.Calls())

	// Inside a caller's transaction: a publish with PublishInTx, and the
	// ack of a handler's transaction.
	d := claim()
	begun := len(f.Calls())
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := transport.PublishInTx(pub, tx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Publish("orders", newMessage()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	htx, err := src.BeginTx(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.CompleteTx(ctx, d, htx); err != nil {
		t.Fatal(err)
	}

	seen := map[string]int{}
	for i, c := range f.Calls() {
		var kind string
		switch {
		case strings.Contains(c.Stmt, claimMark):
			kind = "claim"
		case strings.Contains(c.Stmt, beginMark):
			kind = "begin"
		case strings.Contains(c.Stmt, completeMark):
			kind = "complete"
		case strings.Contains(c.Stmt, "OPENJSON(@p1) WITH (n int"):
			kind = "insert"
		default:
			continue
		}
		switch {
		case i < own || kind == "claim" || kind == "begin":
			seen["own "+kind]++
			if !isolationSet(c.Stmt) {
				t.Errorf("Berth's own %s does not set READ COMMITTED:\n%s", kind, c.Stmt)
			}
		case i >= begun:
			seen["caller's "+kind]++
			if strings.Contains(c.Stmt, "ISOLATION LEVEL") {
				t.Errorf("the %s inside the caller's transaction changes the isolation level:\n%s", kind, c.Stmt)
			}
		}
	}
	for _, k := range []string{"own claim", "own begin", "own complete", "own insert", "caller's insert", "caller's complete"} {
		if seen[k] == 0 {
			t.Errorf("no %s reached the fake (seen %v)", k, seen)
		}
	}
}

// A MaxMessageSize over MaxMessageSize fails the constructor, naming the
// limit (issue 37 item 8).
func TestMaxMessageSizeCapped(t *testing.T) {
	_, db := openFake(t)
	_, err := sqlqueue.NewPublisher(Dialect{}, sqlqueue.PublisherConfig{DB: db, MaxMessageSize: MaxMessageSize + 1}, watermill.NopLogger{})
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	if !strings.Contains(err.Error(), "MaxMessageSize: at most 16777216 bytes on sqlserver") {
		t.Errorf("the error does not name the limit: %v", err)
	}
	pub, err := sqlqueue.NewPublisher(Dialect{}, sqlqueue.PublisherConfig{DB: db, MaxMessageSize: MaxMessageSize}, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("MaxMessageSize at the limit: %v", err)
	}
	_ = pub.Close()
}
