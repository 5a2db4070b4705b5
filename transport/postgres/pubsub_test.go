package postgres_test

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/transporttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.WatermillSuiteLeaks...)
}

// withParams adds Berth parameters to a postgres:// URL.
func withParams(t testing.TB, base string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// openDB opens a small pool on a fresh schema, closed at cleanup.
func openDB(t testing.TB, conns int) *sql.DB {
	t.Helper()
	db, err := postgres.Open(testenv.PostgresSchemaURL(t), conns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newPub returns a publisher on db, closed at cleanup.
func newPub(t *testing.T, db *sql.DB, mut ...func(*sqlqueue.PublisherConfig)) *sqlqueue.Publisher {
	t.Helper()
	c := sqlqueue.PublisherConfig{DB: db}
	for _, m := range mut {
		m(&c)
	}
	p, err := postgres.NewPublisher(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// newSource returns a source on topic's queue without a sweeper, closed at
// cleanup.
func newSource(t *testing.T, db *sql.DB, topic string, mut ...func(*sqlqueue.SubscriberConfig)) *sqlqueue.Source {
	t.Helper()
	return newDialectSource(t, postgres.Dialect{}, db, topic, mut...)
}

// newDialectSource is newSource with dialect d.
func newDialectSource(t *testing.T, d sqlqueue.Dialect, db *sql.DB, topic string, mut ...func(*sqlqueue.SubscriberConfig)) *sqlqueue.Source {
	t.Helper()
	c := testPipeline()
	c.DB = db
	c.SweepInterval = -1
	for _, m := range mut {
		m(&c)
	}
	s, err := sqlqueue.NewSource(context.Background(), d, c, topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// waitFor polls cond until it holds, or fails t after d.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not synchronising
	}
}

func testPipeline() sqlqueue.SubscriberConfig {
	var c sqlqueue.SubscriberConfig
	c.Pipeline.Concurrency = 8
	c.Pipeline.RetryDelay = 10 * time.Millisecond
	c.Pipeline.EmptyDelay = 100 * time.Millisecond
	c.Pipeline.MaxAttempts = -1
	c.Pipeline.DrainTimeout = 5 * time.Second
	return c
}

// features are the transport's honest Watermill features: at-least-once,
// no order guarantee (concurrent claims and retries reorder), persistent
// queues, consumer groups through the subscriptions table. A new
// subscriber does not receive messages published before its group was
// first subscribed.
var features = tests.Features{
	ConsumerGroups:                      true,
	ExactlyOnceDelivery:                 false,
	GuaranteedOrder:                     false,
	GuaranteedOrderWithSingleSubscriber: false,
	Persistent:                          true,
	NewSubscriberReceivesOldMessages:    false,
}

// suiteParams are the URL parameters of Watermill's suite: its tests nack
// some messages hundreds of times, so retry fast and forever.
var suiteParams = []string{
	"concurrency", "8", "retry_delay", "10ms", "max_retry_delay", "10ms",
	"max_attempts", "-1", "empty_delay", "100ms", "drain_timeout", "5s",
}

// kit returns the conformance constructors over one fresh schema.
// Watermill's suite goes through the URL API (transport.OpenPublisher,
// OpenSubscriber): its up to 50 concurrent subscribers share the
// process-wide pool of the URL's DSN. Berth's behaviours use the typed
// constructors on a pool of their own, with a short lease, fetch timeout and
// sweep interval so that a row whose settlement panicked (RunFaults) is
// recovered within seconds.
func kit(t *testing.T) transporttest.Config {
	base := testenv.PostgresSchemaURL(t)
	db, err := postgres.Open(base, 6)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })

	openURL := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		ctx := t.Context()
		pub, err := transport.OpenPublisher(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		kv := suiteParams
		if group != "" {
			kv = append(append([]string(nil), kv...), "consumer_group", group)
		}
		sub, err := transport.OpenSubscriber(ctx, withParams(t, base, kv...))
		if err != nil {
			t.Fatal(err)
		}
		// Watermill's suite leaves some of them open; Close is idempotent.
		t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
		return pub, sub
	}
	return transporttest.Config{
		Features:               features,
		NewPubSub:              func(t *testing.T) (message.Publisher, message.Subscriber) { return openURL(t, "") },
		NewConsumerGroupPubSub: openURL,
		NewPubSubWith: func(t *testing.T, p receiver.Config) (message.Publisher, message.Subscriber) {
			pub, err := postgres.NewPublisher(postgres.PublisherConfig{DB: db}, nil)
			if err != nil {
				t.Fatal(err)
			}
			sub, err := postgres.NewSubscriber(postgres.SubscriberConfig{
				DB:            db,
				Pipeline:      p,
				Lease:         2 * time.Second,
				FetchTimeout:  2 * time.Second,
				SweepInterval: 250 * time.Millisecond,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
			return pub, sub
		},
		DeadLetters: func(t *testing.T, topic string) []transporttest.DeadLetter {
			return deadLetters(t, db, topic)
		},
	}
}

// deadLetters reads the error table rows of topic's default queue.
func deadLetters(t *testing.T, db *sql.DB, topic string) []transporttest.DeadLetter {
	t.Helper()
	rows, err := db.Query(`SELECT message_uuid, reason FROM berth_errors WHERE queue_table = $1 ORDER BY id`,
		sqlqueue.QueueTableName(sqlqueue.DefaultTablePrefix, topic, ""))
	if err != nil {
		t.Fatalf("read dead letters: %v", err)
	}
	defer rows.Close()
	var out []transporttest.DeadLetter
	for rows.Next() {
		var d transporttest.DeadLetter
		if err := rows.Scan(&d.UUID, &d.Reason); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConformance runs the conformance kit: Watermill's full suite (through
// postgres:// URLs) and Berth's behaviours.
func TestConformance(t *testing.T) {
	transporttest.Run(t, kit(t))
}

// TestDelays checks that Watermill's delay metadata (components/delay) is
// honoured with sub-second precision, and a malformed value refused.
func TestDelays(t *testing.T) {
	transporttest.RunDelays(t, kit(t), transporttest.Delays{SubSecond: true})
}

// TestFaults injects a panic at every pipeline point. The injector is
// process-wide: this test must not run in parallel with others.
func TestFaults(t *testing.T) {
	transporttest.RunFaults(t, kit(t))
}
