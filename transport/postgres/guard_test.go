package postgres_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/guard/guardtest"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/postgres"
)

// The wake-up listener logs each lost connection into a logger whose every
// method panics, and keeps reconnecting: its backend is terminated again
// and again (pg_terminate_backend), and each loss is logged, so the loop
// outlived the panics; the subscriber still receives afterwards.
func TestWakeListenerSurvivesPanickingLogger(t *testing.T) {
	app := "berth_guard_" + watermill.NewShortUUID()
	db, err := postgres.Open(withParams(t, testenv.PostgresSchemaURL(t), "application_name", app), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	admin := openDB(t, 1)
	logger := &guardtest.PanicLogger{}
	sub, err := postgres.NewSubscriber(postgres.SubscriberConfig{DB: db}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(context.Background(), "guarded")
	if err != nil {
		t.Fatal(err)
	}
	const lost = "wake-up listener lost its connection"
	waitUntil(t, 30*time.Second, func() bool {
		if logger.Count(lost) >= 2 {
			return true
		}
		terminate(t, admin, app) // the listener's connection among them
		return false
	})

	pub := newPub(t, db)
	if err := pub.Publish("guarded", message.NewMessage(watermill.NewUUID(), []byte("after"))); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		m.Ack()
	case <-time.After(30 * time.Second):
		t.Fatal("no message after the listener's connection was lost")
	}
}

// terminate ends every backend whose application_name is app, if any.
func terminate(t *testing.T, db *sql.DB, app string) {
	t.Helper()
	if _, err := db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
		t.Fatal(err)
	}
}
