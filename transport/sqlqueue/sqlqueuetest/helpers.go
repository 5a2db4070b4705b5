package sqlqueuetest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// subConfig is the subscriber config of the cases on db: 8 permits, fast
// retries forever, a short empty delay and drain.
func (f *fixture) subConfig(db *sql.DB) sqlqueue.SubscriberConfig {
	c := sqlqueue.SubscriberConfig{DB: db, Tables: f.env.Tables}
	c.Pipeline.Concurrency = 8
	c.Pipeline.RetryDelay = 10 * time.Millisecond
	c.Pipeline.EmptyDelay = 100 * time.Millisecond
	c.Pipeline.MaxAttempts = -1
	c.Pipeline.DrainTimeout = 5 * time.Second
	return c
}

// newPub returns a publisher on db, closed at cleanup.
func (f *fixture) newPub(t *testing.T, db *sql.DB, mut ...func(*sqlqueue.PublisherConfig)) *sqlqueue.Publisher {
	t.Helper()
	c := sqlqueue.PublisherConfig{DB: db, Tables: f.env.Tables}
	for _, m := range mut {
		m(&c)
	}
	p, err := sqlqueue.NewPublisher(f.h.Dialect, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// newSubscriber returns a subscriber with config c, closed at cleanup
// (Close is idempotent: a case may close it earlier).
func (f *fixture) newSubscriber(t *testing.T, c sqlqueue.SubscriberConfig) *sqlqueue.Subscriber {
	t.Helper()
	s, err := sqlqueue.NewSubscriber(f.h.Dialect, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newSource returns a source on topic's queue without a sweeper, closed at
// cleanup.
func (f *fixture) newSource(t *testing.T, db *sql.DB, topic string) *sqlqueue.Source {
	t.Helper()
	c := f.subConfig(db)
	c.SweepInterval = -1
	return f.openSource(t, c, topic)
}

func (f *fixture) openSource(t *testing.T, c sqlqueue.SubscriberConfig, topic string) *sqlqueue.Source {
	t.Helper()
	s, err := sqlqueue.NewSource(context.Background(), f.h.Dialect, c, topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// publishN publishes n messages in one call: payload body-<i>, metadata
// i=<i>. It returns their UUIDs in order.
func PublishN(t *testing.T, p message.Publisher, topic string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		ids[i] = watermill.NewUUID()
		msgs[i] = message.NewMessage(ids[i], []byte(fmt.Sprintf("body-%d", i)))
		msgs[i].Metadata.Set("i", fmt.Sprint(i))
	}
	if err := p.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	return ids
}

// rowStates counts table's rows by state.
func RowStates(t *testing.T, db *sql.DB, table string) map[int]int {
	t.Helper()
	rows, err := db.Query(`SELECT state, count(*) FROM ` + table + ` GROUP BY state`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[int]int{}
	for rows.Next() {
		var s, n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		m[s] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// rowID is a delivery's row id.
func rowID(t *testing.T, id string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		t.Fatalf("delivery id %q is not a row id: %v", id, err)
	}
	return n
}

// waitFor polls cond until it holds, or fails t after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not synchronising
	}
}

// withParams adds query parameters to rawURL.
func withParams(t *testing.T, rawURL string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("Harness.URL: %v", err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// ClaimPayloads claims up to n rows from src and returns the deliveries
// and their payloads as strings, in claim order.
func ClaimPayloads(t *testing.T, src *sqlqueue.Source, n int) ([]*transport.Delivery, []string) {
	t.Helper()
	ctx := context.Background()
	ds, err := src.Claim(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, 0, len(ds))
	for _, d := range ds {
		m, err := src.Map(d)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.Payload))
	}
	return ds, got
}
