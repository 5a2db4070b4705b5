package all_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/sqlservertest"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlserver"
)

// subscriberParams are subscriber parameters a service's one BERTH_URL
// carries, which its publisher must accept.
const subscriberParams = "max_attempts=3&concurrency=4&retry_delay=20ms&empty_delay=50ms"

// TestREADMESnippet runs the README's snippet on every scheme, with one
// BERTH_URL carrying subscriber parameters: both sides open from it, a
// message goes through, and the observer given as an option sees it. mem
// and sqlite need no service; postgres and sqs use testenv's and skip
// without them (fail under CI=true); sqlserver runs with
// BERTH_TEST_SQLSERVER_URL.
func TestREADMESnippet(t *testing.T) {
	for _, c := range []struct {
		scheme string
		url    func(t *testing.T) string
	}{
		{"mem", func(*testing.T) string { return "mem://readme?" + subscriberParams }},
		{"sqlite", func(t *testing.T) string {
			return "sqlite://" + filepath.Join(t.TempDir(), "readme.db") + "?" + subscriberParams
		}},
		{"postgres", func(t *testing.T) string { return testenv.PostgresSchemaURL(t) + "&" + subscriberParams }},
		{"sqlserver", func(t *testing.T) string {
			u := withQuery(t, testenv.SQLServerURL(t), "schema", testenv.UniqueName("readme"))
			t.Cleanup(func() { dropSQLServerSchema(t, u) })
			return u + "&" + subscriberParams
		}},
		{"sqs", func(t *testing.T) string {
			c := testenv.SQSConfig(t)
			e, err := url.Parse(c.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			return "sqs://" + c.AccessKeyID + ":" + c.SecretAccessKey + "@" + e.Host +
				"?region=" + c.Region + "&create=true&wait_time=1s&" + subscriberParams
		}},
	} {
		t.Run(c.scheme, func(t *testing.T) {
			t.Setenv("BERTH_URL", c.url(t))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rec := newRecorder()

			// The README's snippet.
			pub, err := transport.OpenPublisher(ctx, os.Getenv("BERTH_URL"))
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			sub, err := transport.OpenSubscriber(ctx, os.Getenv("BERTH_URL"), transport.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()

			topic := testenv.UniqueName("readme")
			msgs, err := sub.Subscribe(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			msg := message.NewMessage(watermill.NewUUID(), []byte("hello"))
			if err := pub.Publish(topic, msg); err != nil {
				t.Fatal(err)
			}
			got := receiveAck(t, msgs)
			if got.UUID != msg.UUID || string(got.Payload) != "hello" {
				t.Fatalf("received %s %q, want %s %q", got.UUID, got.Payload, msg.UUID, "hello")
			}
			eventually(t, "the ack observed", func() bool {
				for _, n := range sub.ListenerStates() {
					if _, _, settled, _ := rec.saw(n.Name); len(settled) == 1 && settled[0] == transport.OutcomeAcked {
						return true
					}
				}
				return false
			})
		})
	}
}

// withQuery returns raw with the query parameter k=v set.
func withQuery(t *testing.T, raw, k, v string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("bad URL: %v", err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

// dropSQLServerSchema drops the schema named by rawURL's schema parameter.
func dropSQLServerSchema(t *testing.T, rawURL string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := sqlserver.ParsePublisherURL(u)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlserver.Open(cfg.DSN, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sqlservertest.DropSchema(ctx, db, cfg.Tables.Schema); err != nil {
		t.Error(err)
	}
}
