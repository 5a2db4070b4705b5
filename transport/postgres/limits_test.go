package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlserver"
)

// limitedDialect is PostgreSQL with SQL Server's column limits, so the
// engine's checks run against a real database here.
type limitedDialect struct{ postgres.Dialect }

func (limitedDialect) Limits() sqlqueue.Limits { return sqlserver.Dialect{}.Limits() }

// TestLimitsNamedBeforeTheServerSeesThem checks that a UUID, topic or
// consumer group longer than the dialect's columns is refused in Go with
// the limit named, and that nothing reaches the queue.
func TestLimitsNamedBeforeTheServerSeesThem(t *testing.T) {
	db := openDB(t, 4)
	ctx := context.Background()
	long := func(n int) string { return strings.Repeat("é", n) }

	cfg := testPipeline()
	cfg.DB, cfg.ConsumerGroup = db, long(129)
	if _, err := sqlqueue.NewSubscriber(limitedDialect{}, cfg, nil); !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "ConsumerGroup: at most 128 characters on postgres, got 129") {
		t.Errorf("long consumer group: %v", err)
	}
	cfg.ConsumerGroup = long(128)
	if sub, err := sqlqueue.NewSubscriber(limitedDialect{}, cfg, nil); err != nil {
		t.Errorf("128-character consumer group: %v", err)
	} else {
		_ = sub.Close()
	}

	pub, err := sqlqueue.NewPublisher(limitedDialect{}, sqlqueue.PublisherConfig{DB: db}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	err = pub.Publish(long(256), message.NewMessage("u", nil))
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "topic: at most 255 characters") {
		t.Errorf("long topic: %v", err)
	}
	// A surrogate pair counts two, as nvarchar counts it.
	err = pub.Publish("orders", message.NewMessage(strings.Repeat("😀", 128), nil))
	if !errors.Is(err, transport.ErrInvalidMessage) || !strings.Contains(err.Error(), "is 256 characters, at most 255 on postgres") {
		t.Errorf("long UUID: %v", err)
	}
	if err := pub.Publish("orders", message.NewMessage(long(255), nil)); err != nil {
		t.Errorf("255-character UUID: %v", err)
	}

	cfg.ConsumerGroup = ""
	src, err := sqlqueue.NewSource(ctx, limitedDialect{}, cfg, long(256), nil)
	if err == nil {
		_ = src.Close(ctx)
	}
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "topic: at most 255 characters") {
		t.Errorf("subscribe to a long topic: %v", err)
	}
}
