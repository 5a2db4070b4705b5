package postgres_test

import (
	"database/sql"
	"net/url"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/testenv"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
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

func testPipeline() sqlqueue.SubscriberConfig {
	var c sqlqueue.SubscriberConfig
	c.Pipeline.Concurrency = 8
	c.Pipeline.RetryDelay = 10 * 1e6 // 10ms
	c.Pipeline.Wave.EmptyDelay = 100 * 1e6
	c.Pipeline.MaxAttempts = -1
	c.Pipeline.DrainTimeout = 5e9
	return c
}

// TestPubSub runs Watermill's universal suite, full size. The suite opens up
// to 50 subscribers at once, so they share one pool of 10 connections (as
// goroutines of one service would); TestURL covers the URL path with its own
// pools.
func TestPubSub(t *testing.T) {
	db := openDB(t, 10)
	open := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		pub, err := postgres.NewPublisher(postgres.PublisherConfig{PublisherConfig: sqlqueue.PublisherConfig{DB: db}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := testPipeline()
		c.DB = db
		c.ConsumerGroup = group
		sub, err := postgres.NewSubscriber(postgres.SubscriberConfig{SubscriberConfig: c}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return pub, sub
	}
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                      true,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: false,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    false,
	}, func(t *testing.T) (message.Publisher, message.Subscriber) {
		return open(t, "")
	}, open)
}
