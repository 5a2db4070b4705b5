package postgres_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// FuzzURL opens subscribers and publishers from arbitrary postgres:// URLs
// (pointed at a closed port: nothing connects before Subscribe): the driver
// never panics, and every error it returns is ErrInvalidConfig without the
// password.
func FuzzURL(f *testing.F) {
	sqlqueuetest.FuzzURL(f, sqlqueuetest.URLFuzz{
		Seeds: []string{
			"postgres://u@h/db?sslmode=disable", "postgres://u:p@h/db?concurrency=4&lease=5s&consumer_group=g",
			"postgres://h/db?bogus=1&lease=soon", "postgres://h/db?max_conns=1", "postgres://h/db?schema=Bad-Schema",
			"postgres://h/db?table_prefix=x&manual_schema=true&application_name=a", "postgres://h/db?sslmode=disable&sslmode=require",
			"postgres://h/db?max_message_size=0&ttl=-1s&delay=1h", "postgres://h/db?sweep_interval=-1&fetch_timeout=1s",
		},
		URL: func(raw string) (*url.URL, bool) {
			u, err := url.Parse(raw)
			if err != nil {
				return nil, false
			}
			u.Scheme, u.Host = "postgres", "127.0.0.1:1"
			return u, true
		},
		Calls: openCalls,
	})
}

// openCalls open a subscriber and a publisher by URL and close them.
var openCalls = map[string]func(*url.URL) error{
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
}
