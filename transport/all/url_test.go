package all_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all"
)

// scheme is one registered scheme with a URL that opens without a server
// (nothing connects before the first Publish or Subscribe), and parameters
// that only its publisher or only its subscriber uses.
type scheme struct {
	name     string
	url      string // with no query, or ending in a query to add to with &
	pubOnly  []string
	subOnly  []string
	subParam string // a subscriber parameter, for the bad-value case
}

func schemes(t *testing.T) []scheme {
	sql := func(name, url string) scheme {
		return scheme{
			name: name, url: url,
			pubOnly:  []string{"max_message_size=2048", "ttl=1h", "subscriptions_ttl=2s"},
			subOnly:  []string{"max_attempts=3", "concurrency=4", "consumer_group=billing", "lease=10s", "retry_delay=20ms"},
			subParam: "lease",
		}
	}
	return []scheme{
		{
			name: "mem", url: "mem://one-url",
			subOnly:  []string{"max_attempts=3", "concurrency=4", "consumer_group=billing", "visibility_timeout=5s"},
			subParam: "visibility_timeout",
		},
		sql("sqlite", "sqlite://"+filepath.Join(t.TempDir(), "one-url.db")),
		sql("postgres", "postgres://berth@127.0.0.1:1/none?sslmode=disable"),
		sql("postgresql", "postgresql://berth@127.0.0.1:1/none?sslmode=disable"),
		sql("sqlserver", "sqlserver://sa:x@127.0.0.1:1?database=none"),
		{
			name: "sqs", url: "sqs://test:test@127.0.0.1:1?region=us-east-1",
			pubOnly:  []string{"publish_concurrency=2", "publish_linger=5ms"},
			subOnly:  []string{"max_attempts=3", "concurrency=4", "consumer_group=billing", "wait_time=1s", "visibility_timeout=10s"},
			subParam: "wait_time",
		},
	}
}

// with returns u with the query parameters kv (name=value each) added.
func with(u string, kv ...string) string {
	if len(kv) == 0 {
		return u
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + strings.Join(kv, "&")
}

// TestOneURLForBothSides: a URL names a destination and how to use it, so
// each side accepts the other side's known parameters (and ignores them),
// checks their values, and still rejects what neither knows, naming it and
// listing the accepted ones.
func TestOneURLForBothSides(t *testing.T) {
	ctx := context.Background()
	for _, s := range schemes(t) {
		t.Run(s.name, func(t *testing.T) {
			if got := transport.Schemes(); !strings.Contains(" "+strings.Join(got, " ")+" ", " "+s.name+" ") {
				t.Fatalf("scheme %s not registered: %v", s.name, got)
			}
			both := with(s.url, append(append([]string{}, s.pubOnly...), s.subOnly...)...)
			pub, err := transport.OpenPublisher(ctx, both)
			if err != nil {
				t.Fatalf("OpenPublisher(%s): %v", both, err)
			}
			if err := pub.Close(); err != nil {
				t.Fatalf("publisher Close: %v", err)
			}
			sub, err := transport.OpenSubscriber(ctx, both)
			if err != nil {
				t.Fatalf("OpenSubscriber(%s): %v", both, err)
			}
			if err := sub.Close(); err != nil {
				t.Fatalf("subscriber Close: %v", err)
			}

			open := map[string]func(string) error{
				"publisher": func(u string) error {
					p, err := transport.OpenPublisher(ctx, u)
					if err == nil {
						_ = p.Close()
					}
					return err
				},
				"subscriber": func(u string) error {
					s, err := transport.OpenSubscriber(ctx, u)
					if err == nil {
						_ = s.Close()
					}
					return err
				},
			}
			for side, open := range open {
				// Neither side knows it: named, with what is accepted,
				// both sides' parameters included.
				err := open(with(s.url, "colour=blue"))
				if !errors.Is(err, transport.ErrInvalidConfig) {
					t.Fatalf("%s: unknown parameter: err = %v, want ErrInvalidConfig", side, err)
				}
				msg := err.Error()
				_, accepted, ok := strings.Cut(msg, "accepted: ")
				if !ok || !strings.Contains(msg, "unknown parameter(s) colour") {
					t.Fatalf("%s: err %q does not name colour and list the accepted parameters", side, msg)
				}
				for _, kv := range append(append([]string{}, s.pubOnly...), s.subOnly...) {
					name, _, _ := strings.Cut(kv, "=")
					if !strings.Contains(accepted, name) {
						t.Errorf("%s: accepted list %q lacks %s", side, accepted, name)
					}
				}
				// The other side's parameters are checked, not just
				// skipped.
				err = open(with(s.url, s.subParam+"=soon-ish"))
				if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), `"`+s.subParam+`"`) {
					t.Fatalf("%s: bad %s: err = %v, want ErrInvalidConfig naming it", side, s.subParam, err)
				}
			}
		})
	}
}
