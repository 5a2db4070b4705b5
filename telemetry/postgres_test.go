package telemetry_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// sqlRoundTrips reports SQL statements by kind, summed over stats.
func sqlRoundTrips(stats ...func() sqlqueue.Stats) telemetry.RoundTripper {
	return telemetry.RoundTripFunc(func() map[string]int64 {
		out := map[string]int64{}
		for _, f := range stats {
			s := f()
			for k, v := range map[string]int64{
				"claim": s.Claims, "begin": s.Begins, "complete": s.Completes, "renew": s.Renews,
				"retry": s.Retries, "release": s.Releases, "dead_letter": s.DeadLetters,
				"insert": s.Inserts, "sweep": s.Sweeps, "tx": s.Tx, "other": s.Other,
			} {
				out[k] += v
			}
		}
		return out
	})
}

var postgresBackend = backend{
	system: postgres.MessagingSystem,
	group:  "billing",
	open: func(t *testing.T, pcfg receiver.Config) (message.Publisher, subscriber, telemetry.RoundTripper) {
		db, err := postgres.Open(testenv.PostgresSchemaURL(t), 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		pub, err := postgres.NewPublisher(postgres.PublisherConfig{DB: db}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var c sqlqueue.SubscriberConfig
		c.DB = db
		c.Pipeline = pcfg
		c.ConsumerGroup = "billing"
		sub, err := postgres.NewSubscriber(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		return pub, sub, sqlRoundTrips(pub.Stats, sub.Stats)
	},
}

// TestPostgres runs the suite over PostgreSQL queue tables
// (BERTH_TEST_POSTGRES_URL).
func TestPostgres(t *testing.T) {
	testenv.PostgresURL(t) // skips (or fails under CI) without a server
	runSuite(t, postgresBackend)
}
