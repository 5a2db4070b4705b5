package postgres_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/stdlib"
	mssql "github.com/microsoft/go-mssqldb"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
	"github.com/berth-go/berth/transport/sqlserver"
)

// faultConnector opens pgx connections whose first statement with the text
// fail (once, across the pool) returns err: without reaching the server, as
// a deadlock victim's statement comes back rolled back, or, with after set,
// once the server ran and committed it, as a reply lost with the
// connection.
type faultConnector struct {
	driver.Connector
	fail  string
	err   error
	after bool
	fired atomic.Bool
}

func (c *faultConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: conn.(*stdlib.Conn), c: c}, nil
}

// faultConn is pgx's connection with every method promoted (named value
// checks, sessions resets, transactions) but QueryContext, the engine's
// only way to run a statement.
type faultConn struct {
	*stdlib.Conn
	c *faultConnector
}

func (f *faultConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if query != f.c.fail || !f.c.fired.CompareAndSwap(false, true) {
		return f.Conn.QueryContext(ctx, query, args)
	}
	if f.c.after {
		rows, err := f.Conn.QueryContext(ctx, query, args)
		if err != nil {
			return nil, err
		}
		if err := rows.Close(); err != nil { // reads the rest: the statement completes
			return nil, err
		}
	}
	return nil, f.c.err
}

// sqlServerErrors is the PostgreSQL dialect classifying errors as the SQL
// Server dialect does, so that an mssql.Error injected under a real
// PostgreSQL pool reads as SQL Server's. It holds postgres.Dialect through
// the sqlqueue.Dialect interface, which leaves its Notifier out: LISTEN
// needs pgx's own connection, not faultConn (publishers wake subscribers
// in-process instead).
type sqlServerErrors struct{ sqlqueue.Dialect }

func (sqlServerErrors) IsTransient(err error) bool  { return sqlserver.Dialect{}.IsTransient(err) }
func (sqlServerErrors) NotCommitted(err error) bool { return sqlserver.Dialect{}.NotCommitted(err) }

// infoLog records Info lines.
type infoLog struct {
	watermill.NopLogger
	mu    sync.Mutex
	lines []string
}

func (l *infoLog) Info(msg string, _ watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, msg)
}

func (l *infoLog) With(watermill.LogFields) watermill.LoggerAdapter { return l }

func (l *infoLog) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// openFaulty opens a pool on the test schema whose first statement with
// the text fail returns err, after running it when after is set.
func openFaulty(t *testing.T, fail string, err error, after bool) (*sql.DB, *faultConnector) {
	t.Helper()
	pgc, cerr := stdlib.GetDefaultDriver().(driver.DriverContext).OpenConnector(testenv.PostgresSchemaURL(t))
	if cerr != nil {
		t.Fatal(cerr)
	}
	fc := &faultConnector{Connector: pgc, fail: fail, err: err, after: after}
	db := sql.OpenDB(fc)
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = db.Close() })
	return db, fc
}

// A statement that comes back as SQL Server's deadlock victim (1205) runs
// again: the message is handled once and settled once, the row is gone,
// nothing is redelivered, and the retry is counted and logged once. One
// subtest per statement that fails: the claim, the lease gate (Begin), the
// ack (Complete) and the publisher's insert.
func TestDeadlockVictimStatementRunsAgain(t *testing.T) {
	d := sqlServerErrors{postgres.Dialect{}}
	for _, c := range []struct {
		name string
		stmt func(q sqlqueue.Queue) string
	}{
		{"claim", func(q sqlqueue.Queue) string { return d.Claim(q, 0, 0, 0).SQL }},
		{"begin", func(q sqlqueue.Queue) string { return d.Begin(q, nil, 0).SQL }},
		{"complete", func(q sqlqueue.Queue) string { return d.Complete(q, nil).SQL }},
		{"publish", func(q sqlqueue.Queue) string { return d.Insert(q, nil)[0].SQL }},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := "retry_" + c.name
			q := sqlqueue.QueueFor(d, sqlqueue.Tables{}, topic, "")
			db, fc := openFaulty(t, c.stmt(q), mssql.Error{Number: 1205, Message: "Transaction was deadlocked; rerun the transaction."}, false)
			log := &infoLog{}
			pub, err := sqlqueue.NewPublisher(d, sqlqueue.PublisherConfig{DB: db}, log)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			cfg := testPipeline()
			cfg.DB, cfg.SweepInterval = db, -1
			sub, err := sqlqueue.NewSubscriber(d, cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			ch, err := sub.Subscribe(context.Background(), topic)
			if err != nil {
				t.Fatal(err)
			}
			id := watermill.NewUUID()
			if err := pub.Publish(topic, message.NewMessage(id, []byte("once"))); err != nil {
				t.Fatal(err)
			}

			select {
			case m := <-ch:
				if m.UUID != id {
					t.Fatalf("received %s, want %s", m.UUID, id)
				}
				m.Ack()
			case <-time.After(30 * time.Second):
				t.Fatal("message not delivered")
			}
			waitFor(t, 10*time.Second, func() bool { return len(sqlqueuetest.RowStates(t, db, q.Table)) == 0 })
			select {
			case m := <-ch:
				t.Fatalf("message %s delivered again", m.UUID)
			default:
			}

			if !fc.fired.Load() {
				t.Fatal("the fault never fired")
			}
			ps, ss := pub.Stats(), sub.Stats()
			if got := ps.StatementRetries + ss.StatementRetries; got != 1 {
				t.Errorf("StatementRetries = %d (publisher) + %d (subscriber), want 1 in all", ps.StatementRetries, ss.StatementRetries)
			}
			if ss.ClaimedRows != 1 || ss.LeaseLost != 0 || ps.Published != 1 {
				t.Errorf("claimed %d rows, %d leases lost, %d published; want 1, 0, 1", ss.ClaimedRows, ss.LeaseLost, ps.Published)
			}
			if n := log.count("transient"); n != 1 {
				t.Errorf("logged the retry %d times, want once", n)
			}
		})
	}
}

// A connection reset mid-insert may have committed: the publisher does not
// insert again (a second run could publish the message twice) and reports
// the error; the claim, idempotent, runs again after the same error.
func TestConnectionResetInsertNotRunAgain(t *testing.T) {
	d := sqlServerErrors{postgres.Dialect{}}
	q := sqlqueue.QueueFor(d, sqlqueue.Tables{}, "reset", "")
	reset := mssql.Error{Number: 10054, Message: "A transport-level error has occurred: connection reset by peer."}
	db, fc := openFaulty(t, d.Insert(q, nil)[0].SQL, reset, false)
	pub, err := sqlqueue.NewPublisher(d, sqlqueue.PublisherConfig{DB: db}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	err = pub.Publish("reset", message.NewMessage(watermill.NewUUID(), []byte("x")))
	var me mssql.Error
	if !errors.As(err, &me) || me.Number != 10054 || !fc.fired.Load() {
		t.Fatalf("Publish = %v, want the connection reset", err)
	}
	if s := pub.Stats(); s.StatementRetries != 0 || s.Published != 0 {
		t.Fatalf("StatementRetries %d, Published %d; want 0, 0", s.StatementRetries, s.Published)
	}

	// The same error on a claim: run again.
	db, fc = openFaulty(t, d.Claim(q, 0, 0, 0).SQL, reset, false)
	src := newDialectSource(t, d, db, "reset")
	if _, err := src.Claim(context.Background(), 1); err != nil || !fc.fired.Load() {
		t.Fatalf("Claim = %v (fault fired: %v), want nil after running again", err, fc.fired.Load())
	}
	if s := src.Stats(); s.StatementRetries != 1 {
		t.Fatalf("StatementRetries = %d, want 1", s.StatementRetries)
	}
}

// The reply of an ack is lost with the connection after the server
// committed it: the ack runs again, and its fence (owner and state) finds
// the row already gone, so it deletes nothing a second time. The message
// is settled once; the source cannot tell its own first run from another
// owner's settlement, and reports the delivery's lease as lost.
func TestLostAckReplySettlesOnce(t *testing.T) {
	d := sqlServerErrors{postgres.Dialect{}}
	q := sqlqueue.QueueFor(d, sqlqueue.Tables{}, "lost_reply", "")
	reset := mssql.Error{Number: 10054, Message: "A transport-level error has occurred: connection reset by peer."}
	db, fc := openFaulty(t, d.Complete(q, nil).SQL, reset, true)
	src := newDialectSource(t, d, db, "lost_reply")
	pub := newPub(t, db)
	sqlqueuetest.PublishN(t, pub, "lost_reply", 1)
	ctx := context.Background()
	ds, err := src.Claim(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim = %d, %v", len(ds), err)
	}
	if err := src.Begin(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	if err := src.Complete(ctx, ds[0]); !errors.Is(err, transport.ErrLeaseLost) || !fc.fired.Load() {
		t.Fatalf("Complete = %v (fault fired: %v), want ErrLeaseLost from the second run", err, fc.fired.Load())
	}
	if n := len(sqlqueuetest.RowStates(t, db, q.Table)); n != 0 {
		t.Fatal("the acked row is still queued")
	}
	var dead int
	if err := db.QueryRow(`SELECT count(*) FROM berth_errors`).Scan(&dead); err != nil || dead != 0 {
		t.Fatalf("error table rows = %d, %v; want 0", dead, err)
	}
	if s := src.Stats(); s.StatementRetries != 1 || s.Completes != 2 {
		t.Fatalf("StatementRetries %d, Completes %d; want 1, 2", s.StatementRetries, s.Completes)
	}
}
