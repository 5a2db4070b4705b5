package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.WatermillSuiteLeaks...) }

// suiteQuery holds the URL parameters of Watermill's suite: its tests nack
// some messages hundreds of times, so retry fast and forever.
const suiteQuery = "concurrency=8&retry_delay=10ms&max_retry_delay=10ms&max_attempts=-1&empty_delay=100ms&drain_timeout=5s"

// kit returns the conformance constructors. Each test of the suite gets a
// database file of its own (keyed by its name: a test that builds several
// publishers and subscribers gets them on one file), so that tests running
// in parallel do not queue for one SQLite write lock. Watermill's suite goes
// through sqlite:// URLs; Berth's behaviours use the typed constructors with
// a short lease, fetch timeout and sweep interval, so a row whose settlement
// panicked (RunFaults) is recovered within seconds.
func kit(t *testing.T) transporttest.Config {
	dir := t.TempDir()
	var (
		mu    sync.Mutex
		files = map[string]string{}
	)
	pathOf := func(t *testing.T) string {
		mu.Lock()
		defer mu.Unlock()
		p, ok := files[t.Name()]
		if !ok {
			p = filepath.Join(dir, fmt.Sprintf("t%d.db", len(files)))
			files[t.Name()] = p
		}
		return p
	}
	openURL := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		ctx := context.Background()
		path := pathOf(t)
		pub, err := transport.OpenPublisher(ctx, "sqlite://"+path)
		if err != nil {
			t.Fatal(err)
		}
		u := "sqlite://" + path + "?" + suiteQuery
		if group != "" {
			u += "&consumer_group=" + group
		}
		sub, err := transport.OpenSubscriber(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		// Watermill's suite leaves some of them open; Close is idempotent.
		t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
		return pub, sub
	}
	return transporttest.Config{
		// At-least-once, no order guarantee (retries reorder), persistent,
		// consumer groups through the subscriptions table.
		Features: tests.Features{
			ConsumerGroups: true,
			Persistent:     true,
		},
		NewPubSub:              func(t *testing.T) (message.Publisher, message.Subscriber) { return openURL(t, "") },
		NewConsumerGroupPubSub: openURL,
		NewPubSubWith: func(t *testing.T, p receiver.Config) (message.Publisher, message.Subscriber) {
			path := pathOf(t)
			pub, err := sqlite.NewPublisher(sqlite.PublisherConfig{DSN: path}, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := sqlite.SubscriberConfig{DSN: path}
			c.Pipeline = p
			c.Lease = 2 * time.Second
			c.FetchTimeout = 2 * time.Second
			c.SweepInterval = 250 * time.Millisecond
			sub, err := sqlite.NewSubscriber(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
			return pub, sub
		},
		DeadLetters: func(t *testing.T, topic string) []transporttest.DeadLetter {
			db, closer, err := sqlite.Open(pathOf(t))
			if err != nil {
				t.Fatal(err)
			}
			defer closer.Close()
			return deadLetters(t, db, topic)
		},
	}
}

// deadLetters reads the error table rows of topic's default queue.
func deadLetters(t *testing.T, db *sql.DB, topic string) []transporttest.DeadLetter {
	t.Helper()
	rows, err := db.Query(`SELECT message_uuid, reason FROM berth_errors WHERE queue_table = ? ORDER BY id`,
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
// sqlite:// URLs) and Berth's behaviours.
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

// subConfig is a subscriber on the file at path with the suite's settings.
func subConfig(path, group string) sqlite.SubscriberConfig {
	c := sqlite.SubscriberConfig{DSN: path}
	c.ConsumerGroup = group
	c.Pipeline.Concurrency = 8
	c.Pipeline.RetryDelay = 10 * time.Millisecond
	c.Pipeline.EmptyDelay = 100 * time.Millisecond
	c.Pipeline.MaxAttempts = -1
	c.Pipeline.DrainTimeout = 5 * time.Second
	return c
}
