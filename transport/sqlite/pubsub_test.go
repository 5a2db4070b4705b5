package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"go.uber.org/goleak"

	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func subConfig(path, group string) sqlite.SubscriberConfig {
	c := sqlite.SubscriberConfig{Path: path}
	c.ConsumerGroup = group
	c.Pipeline.Concurrency = 8
	c.Pipeline.RetryDelay = 10 * time.Millisecond
	c.Pipeline.Wave.EmptyDelay = 100 * time.Millisecond
	c.Pipeline.MaxAttempts = -1
	c.Pipeline.DrainTimeout = 5 * time.Second
	return c
}

// TestPubSub runs Watermill's universal suite, full size, on one database
// file per test.
func TestPubSub(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pubsub.db")
	open := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		pub, err := sqlite.NewPublisher(sqlite.PublisherConfig{Path: path}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := sqlite.NewSubscriber(subConfig(path, group), nil)
		if err != nil {
			t.Fatal(err)
		}
		return pub, sub
	}
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups: true,
		Persistent:     true,
	}, func(t *testing.T) (message.Publisher, message.Subscriber) { return open(t, "") }, open)
	_ = sqlqueue.DefaultLease
}
