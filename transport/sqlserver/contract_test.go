package sqlserver_test

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/berth-go/berth/internal/sqlservertest"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlserver"
	"github.com/berth-go/berth/transport/transporttest"
)

// TestContract runs the conformance kit (Watermill's full tests.TestPubSub
// with ConsumerGroups and Persistent, then Berth's behaviours) against the
// SQL Server at BERTH_TEST_SQLSERVER_URL, in a schema of its own that is
// dropped afterwards. Without the variable it skips, even under CI=true:
// SQL Server cannot run on the CI machines.
func TestContract(t *testing.T) {
	transporttest.Run(t, contractConfig(t))
}

// TestContractFaults injects panics at every pipeline point over SQL
// Server (not in parallel: the injector is process-wide); rows whose
// settlement panicked come back through the 3-second lease.
func TestContractFaults(t *testing.T) {
	transporttest.RunFaults(t, contractConfig(t))
}

func contractConfig(t *testing.T) transporttest.Config {
	base := testenv.SQLServerURL(t)
	schema := testenv.UniqueName("berth")
	db := openAdmin(t, base)
	t.Cleanup(func() { dropSchema(t, db, schema) })

	with := func(t *testing.T, kv ...string) string {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("schema", schema)
		for i := 0; i+1 < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	open := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		ctx := context.Background()
		pub, err := transport.OpenPublisher(ctx, with(t, "max_conns", "2"))
		if err != nil {
			t.Fatal(err)
		}
		params := []string{"max_conns", "4", "concurrency", "8", "retry_delay", "10ms",
			"empty_delay", "100ms", "max_attempts", "-1", "drain_timeout", "5s"}
		if group != "" {
			params = append(params, "consumer_group", group)
		}
		sub, err := transport.OpenSubscriber(ctx, with(t, params...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
		return pub, sub
	}
	dsn, err := sqlserver.ParsePublisherURL(mustParse(t, with(t)))
	if err != nil {
		t.Fatal(err)
	}
	return transporttest.Config{
		Features: tests.Features{
			ConsumerGroups:                      true,
			ExactlyOnceDelivery:                 false,
			GuaranteedOrder:                     false,
			GuaranteedOrderWithSingleSubscriber: false,
			Persistent:                          true,
			NewSubscriberReceivesOldMessages:    false,
		},
		NewPubSub: func(t *testing.T) (message.Publisher, message.Subscriber) { return open(t, "") },
		NewConsumerGroupPubSub: func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return open(t, group)
		},
		NewPubSubWith: func(t *testing.T, p receiver.Config) (message.Publisher, message.Subscriber) {
			pcfg := sqlserver.PublisherConfig{DSN: dsn.DSN, MaxOpenConns: 2}
			pcfg.Tables.Schema = schema
			pub, err := sqlserver.NewPublisher(pcfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			scfg := sqlserver.SubscriberConfig{DSN: dsn.DSN, MaxOpenConns: 4}
			scfg.Tables.Schema = schema
			scfg.Pipeline = p
			scfg.Lease = 3 * time.Second
			scfg.FetchTimeout = 3 * time.Second
			scfg.SweepInterval = time.Second
			sub, err := sqlserver.NewSubscriber(scfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
			return pub, sub
		},
		DeadLetters: func(t *testing.T, topic string) []transporttest.DeadLetter {
			names := sqlqueue.NamesFor(sqlserver.Dialect{}, sqlqueue.Tables{Schema: schema})
			table := sqlqueue.QueueTableName(sqlqueue.DefaultTablePrefix, topic, "")
			rows, err := db.Query(`SELECT message_uuid, reason FROM `+names.Errors+` WHERE queue_table = @p1 ORDER BY id`, table)
			if err != nil {
				t.Fatal(err)
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
		},
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// openAdmin opens a small pool on the test server for set-up and checks.
func openAdmin(t *testing.T, base string) *sql.DB {
	t.Helper()
	cfg, err := sqlserver.ParsePublisherURL(mustParse(t, base))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlserver.Open(cfg.DSN, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("SQL Server at BERTH_TEST_SQLSERVER_URL: %v", err)
	}
	return db
}

// TestCleanupGrammar checks the cleanup batch with the dialect's grammar
// check: the previous one could never run on a server.
func TestCleanupGrammar(t *testing.T) {
	for _, p := range sqlserver.CheckGrammar(sqlservertest.DropSchemaSQL) {
		t.Error(p)
	}
}

// dropSchema drops every table of schema, then the schema, and checks that
// nothing is left.
func dropSchema(t *testing.T, db *sql.DB, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sqlservertest.DropSchema(ctx, db, schema); err != nil {
		t.Error(err)
	}
}
