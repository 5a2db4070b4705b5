package sqlite_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// FuzzURL opens subscribers and publishers from sqlite:// URLs with
// arbitrary query parameters (on the in-memory database, so the fuzzer
// creates no files): the driver never panics, and every error it returns
// is ErrInvalidConfig without the password.
func FuzzURL(f *testing.F) {
	sqlqueuetest.FuzzURL(f, sqlqueuetest.URLFuzz{
		Seeds: []string{
			"", "concurrency=4&lease=5s", "lease=soon&bogus=1", "consumer_group=g&max_attempts=-1",
			"table_prefix=Bad-Prefix", "buffer=0&max_queue=1&restart_queue=5", "wave_cap=0&empty_delay=-1s",
			"max_message_size=0&ttl=-1s", "lease=1s&lease=2s", "sweep_interval=-1&fetch_timeout=1s",
		},
		URL: func(query string) (*url.URL, bool) {
			if _, err := url.ParseQuery(query); err != nil {
				return nil, false
			}
			return &url.URL{Scheme: "sqlite", Host: sqlite.Memory, RawQuery: query}, true
		},
		Calls: map[string]func(*url.URL) error{
			"OpenSubscriber": func(u *url.URL) error {
				s, err := transport.OpenSubscriber(context.Background(), u.String())
				if err == nil {
					_ = s.Close()
				}
				return err
			},
			"OpenPublisher": func(u *url.URL) error {
				p, err := transport.OpenPublisher(context.Background(), u.String())
				if err == nil {
					_ = p.Close()
				}
				return err
			},
		},
	})
}
