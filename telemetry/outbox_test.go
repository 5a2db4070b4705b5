package telemetry_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/mem"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlite"
)

// The outbox through OpenPublisher and the telemetry decorator:
// transport.PublishInTx finds the SQL publisher's capability through the
// decorator; a committed transaction delivers its business row and its
// message, a rolled-back one neither; the publish inside the transaction
// still gets its send span.
func TestPublishInTxThroughDecorator(t *testing.T) {
	cases := map[string]func(t *testing.T) (url string, db *sql.DB){
		"sqlite": func(t *testing.T) (string, *sql.DB) {
			path := filepath.Join(t.TempDir(), "outbox.db")
			db, closer, err := sqlite.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = closer.Close() })
			return "sqlite://" + path, db
		},
		"postgres": func(t *testing.T) (string, *sql.DB) {
			raw := testenv.PostgresURL(t)
			db, err := postgres.Open(raw, 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return raw + "&table_prefix=" + testenv.UniqueName("obx") + "_", db
		},
	}
	for name, open := range cases {
		t.Run(name, func(t *testing.T) {
			url, db := open(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := newRig(t)
			raw, err := transport.OpenPublisher(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			pub := telemetry.Publisher(raw, r.config())
			defer pub.Close()
			sub, err := transport.OpenSubscriber(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			topic := testenv.UniqueName("orders")
			orders := testenv.UniqueName("biz_orders")
			if _, err := db.ExecContext(ctx, "CREATE TABLE "+orders+" (id TEXT PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
			if name == "sqlite" {
				// SQLite: the process shares one connection, which the
				// caller's transaction holds, and WithTx creates a
				// missing queue on the publisher's pool first: the
				// topic's tables must exist before the transaction
				// (transport.PublishInTx's doc).
				if err := pub.Publish(topic, message.NewMessage("warm-up", nil)); err != nil {
					t.Fatal(err)
				}
			}
			ch, err := sub.Subscribe(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}

			outbox := func(id string, commit bool) {
				t.Helper()
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+orders+" (id) VALUES ('"+id+"')"); err != nil {
					t.Fatal(err)
				}
				txPub, err := transport.PublishInTx(pub, tx)
				if err != nil {
					t.Fatal(err)
				}
				if err := txPub.Publish(topic, message.NewMessage(id, []byte(id))); err != nil {
					t.Fatal(err)
				}
				if commit {
					if err := tx.Commit(); err != nil {
						t.Fatal(err)
					}
				} else if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
			}
			outbox("rolled-back", false)
			outbox("committed", true)
			r.spansNamed(t, "send "+topic, 2)

			// The rolled-back message was published before the committed
			// one: had it been written, it would be claimable by now.
			if err := pub.Publish(topic, message.NewMessage("after", nil)); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for !got["committed"] || !got["after"] {
				select {
				case m := <-ch:
					got[m.UUID] = true
					m.Ack()
				case <-ctx.Done():
					t.Fatalf("received %v, want committed and after", got)
				}
			}
			if got["rolled-back"] {
				t.Fatal("the rolled-back transaction's message was delivered")
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+orders).Scan(&n); err != nil || n != 1 {
				t.Fatalf("business rows = %d, %v; want 1 (the committed one)", n, err)
			}
		})
	}
}

// A publisher that cannot publish in a transaction, decorated or not, is
// ErrTxUnsupported.
func TestPublishInTxUnsupported(t *testing.T) {
	raw, err := transport.OpenPublisher(context.Background(), "mem://"+testenv.UniqueName("outbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	db, closer, err := sqlite.Open(sqlite.Memory)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, pub := range []message.Publisher{raw, telemetry.Publisher(raw, newRig(t).config())} {
		if _, err := transport.PublishInTx(pub, tx); !errors.Is(err, transport.ErrTxUnsupported) {
			t.Errorf("%T: err = %v, want ErrTxUnsupported", pub, err)
		}
	}
	if _, err := transport.PublishInTx(raw, nil); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("nil tx: err = %v, want ErrInvalidConfig", err)
	}
}
