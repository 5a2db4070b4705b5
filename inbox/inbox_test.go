package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/goleak"

	"github.com/berth-go/berth/inbox"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/mem"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlite"
	_ "github.com/berth-go/berth/transport/sqs"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append([]goleak.Option{
		// The SQS client's HTTP transport keeps idle keep-alive connections.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	}, testenv.WatermillSuiteLeaks...)...)
}

// effectsDB is a database for the effects: PostgreSQL in a schema of its
// own, or SQLite in a file (the process's shared handle).
type effectsDB struct {
	name string
	open func(t *testing.T) *sql.DB
}

func effectsDBs() []effectsDB {
	return []effectsDB{
		{"postgres", func(t *testing.T) *sql.DB {
			db, err := postgres.Open(testenv.PostgresSchemaURL(t), 8)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return db
		}},
		{"sqlite", func(t *testing.T) *sql.DB {
			db, closer, err := sqlite.Open(filepath.Join(t.TempDir(), "effects.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = closer.Close() })
			return db
		}},
	}
}

func ph(db *sql.DB, n int) string {
	if fmt.Sprintf("%T", db.Driver()) == "*sqlite.Driver" {
		return "?"
	}
	return "$" + strconv.Itoa(n)
}

// TestLedgerThroughInbox: a router handler on mem:// and on SQS adds 1 to
// each message's counter in the inbox's transaction, found with
// transport.TxFromContext. Every message is published twice (a duplicate
// the broker cannot tell apart) and a third of them fail once after
// writing. Every counter ends at exactly 1, and the duplicates are skipped.
func TestLedgerThroughInbox(t *testing.T) {
	brokers := []struct{ name, url string }{{"mem", "mem://inbox-" + watermill.NewShortUUID() + "?retry_delay=10ms"}}
	if ep := testenv.SQSEndpoint(t); ep != "" {
		e, err := url.Parse(ep)
		if err != nil {
			t.Fatal(err)
		}
		brokers = append(brokers, struct{ name, url string }{"sqs", "sqs://test:test@" + e.Host + "?region=us-east-1&create=true&retry_delay=1s&wait_time=1s"})
	}
	for _, b := range brokers {
		for _, e := range effectsDBs() {
			t.Run(b.name+"/"+e.name, func(t *testing.T) {
				t.Parallel()
				ledger(t, b.url, e.open(t))
			})
		}
	}
}

func ledger(t *testing.T, brokerURL string, db *sql.DB) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := db.Exec(`CREATE TABLE ledger (k VARCHAR(64) NOT NULL PRIMARY KEY, n INT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(ctx, inbox.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := in.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	pub, err := transport.OpenPublisher(ctx, brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := transport.OpenSubscriber(ctx, brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	topic := "ledger_" + watermill.NewShortUUID()
	if si, ok := sub.(message.SubscribeInitializer); ok {
		if err := si.SubscribeInitialize(topic); err != nil {
			t.Fatal(err)
		}
	}

	const n = 30
	ids := make([]string, n)
	for i := range ids {
		ids[i] = watermill.NewUUID()
		if _, err := db.Exec(`INSERT INTO ledger (k, n) VALUES (`+ph(db, 1)+`, 0)`, ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu       sync.Mutex
		attempts = map[string]int{}
		done     = make(chan struct{})
		closed   bool
	)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	handler := router.AddConsumerHandler("ledger", topic, sub, func(msg *message.Message) error {
		tx, err := transport.TxFromContext(msg.Context())
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(msg.Context(), `UPDATE ledger SET n = n + 1 WHERE k = `+ph(db, 1), msg.UUID); err != nil {
			return err
		}
		i, _ := strconv.Atoi(string(msg.Payload))
		mu.Lock()
		attempts[msg.UUID]++
		first := attempts[msg.UUID] == 1
		mu.Unlock()
		if first && i%3 == 0 {
			return errors.New("fails after writing: rolled back with the key")
		}
		return nil
	})
	handler.AddMiddleware(in.Middleware)
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	for round := range 2 { // every message twice: the second is a duplicate
		for i, id := range ids {
			if err := pub.Publish(topic, message.NewMessage(id, []byte(strconv.Itoa(i)))); err != nil {
				t.Fatalf("publish round %d: %v", round, err)
			}
		}
	}
	go func() {
		for ctx.Err() == nil {
			if in.Handled() == n && in.Skipped() >= n {
				mu.Lock()
				if !closed {
					closed = true
					close(done)
				}
				mu.Unlock()
				return
			}
			time.Sleep(20 * time.Millisecond) // polling a condition
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("handled %d, skipped %d; want %d and %d", in.Handled(), in.Skipped(), n, n)
	}
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil { // waits for a close the router started
		t.Fatal(err)
	}
	for i, id := range ids {
		var v int
		if err := db.QueryRow(`SELECT n FROM ledger WHERE k = `+ph(db, 1), id).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != 1 {
			t.Errorf("message %d: counter %d, want 1", i, v)
		}
	}
	if got := in.Skipped(); got != n {
		t.Errorf("skipped %d duplicates, want %d", got, n)
	}
}

// TestConcurrentDuplicate: two deliveries of one message at once (an SQS
// visibility timeout ran out under a slow handler): the second waits on the
// key until the first commits, then is skipped.
func TestConcurrentDuplicate(t *testing.T) {
	for _, e := range effectsDBs() {
		t.Run(e.name, func(t *testing.T) {
			db := e.open(t)
			ctx := context.Background()
			in, err := inbox.New(ctx, inbox.Config{DB: db, PruneInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			var runs sync.WaitGroup
			release := make(chan struct{})
			ran := make(chan struct{}, 2)
			h := in.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				ran <- struct{}{}
				<-release
				return nil, nil
			})
			errs := make(chan error, 2)
			for range 2 {
				runs.Add(1)
				go func() {
					defer runs.Done()
					_, err := h(message.NewMessage("same-id", nil))
					errs <- err
				}()
			}
			<-ran // one handler runs; the other waits on the key or has not started
			close(release)
			runs.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if len(ran) != 0 || in.Handled() != 1 || in.Skipped() != 1 {
				t.Fatalf("handler ran %d extra times, handled %d, skipped %d; want 0, 1, 1", len(ran), in.Handled(), in.Skipped())
			}
		})
	}
}

// TestHandlerFailureRollsBackKey: a failed handler leaves no key (the
// redelivery runs it again), and CommitTx commits at once.
func TestHandlerFailureRollsBackKey(t *testing.T) {
	for _, e := range effectsDBs() {
		t.Run(e.name, func(t *testing.T) {
			db := e.open(t)
			ctx := context.Background()
			in, err := inbox.New(ctx, inbox.Config{DB: db, PruneInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			fail := true
			calls := 0
			h := in.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				calls++
				if fail {
					return nil, errors.New("boom")
				}
				if err := transport.CommitTx(msg.Context()); err != nil {
					return nil, err
				}
				if _, err := transport.TxFromContext(msg.Context()); !errors.Is(err, sql.ErrTxDone) {
					return nil, fmt.Errorf("TxFromContext after CommitTx = %v, want ErrTxDone", err)
				}
				return nil, errors.New("fails after CommitTx: the key is kept")
			})
			if _, err := h(message.NewMessage("m", nil)); err == nil {
				t.Fatal("want the handler's error")
			}
			fail = false
			if _, err := h(message.NewMessage("m", nil)); err == nil || err.Error() != "fails after CommitTx: the key is kept" {
				t.Fatalf("second delivery: %v", err)
			}
			if _, err := h(message.NewMessage("m", nil)); err != nil {
				t.Fatalf("third delivery = %v, want skipped", err)
			}
			if calls != 2 || in.Skipped() != 1 {
				t.Fatalf("calls %d, skipped %d; want 2, 1", calls, in.Skipped())
			}
		})
	}
}

// TestPrune deletes keys past the retention and keeps the others.
func TestPrune(t *testing.T) {
	for _, e := range effectsDBs() {
		t.Run(e.name, func(t *testing.T) {
			db := e.open(t)
			ctx := context.Background()
			in, err := inbox.New(ctx, inbox.Config{DB: db, Table: "app_inbox", Retention: time.Hour, PruneInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			h := in.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
			for _, id := range []string{"old", "new"} {
				if _, err := h(message.NewMessage(id, nil)); err != nil {
					t.Fatal(err)
				}
			}
			old := `UPDATE app_inbox SET handled_at = now() - interval '2 hours' WHERE message_key = '/old'`
			if e.name == "sqlite" {
				old = fmt.Sprintf(`UPDATE app_inbox SET handled_at = %d WHERE message_key = '/old'`, time.Now().Add(-2*time.Hour).UnixMilli())
			}
			if _, err := db.Exec(old); err != nil {
				t.Fatal(err)
			}
			n, err := in.Prune(ctx)
			if err != nil || n != 1 {
				t.Fatalf("Prune = %d, %v; want 1", n, err)
			}
			// The pruned key's message would run again; the kept one not.
			if _, err := h(message.NewMessage("new", nil)); err != nil || in.Skipped() != 1 {
				t.Fatalf("kept key: %v, skipped %d", err, in.Skipped())
			}
		})
	}
}

// TestConfigNamesFields: invalid configs name each field.
func TestConfigNamesFields(t *testing.T) {
	_, err := inbox.New(context.Background(), inbox.Config{Dialect: "oracle", Table: "x; DROP", Retention: -time.Second})
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"DB:", "Dialect:", "Table:", "Retention:"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
}
