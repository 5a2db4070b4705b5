package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/postgres"
)

// FuzzURL opens subscribers and publishers from arbitrary postgres:// URLs
// (pointed at a closed port: nothing connects before Subscribe): the driver
// never panics, and every error it returns is ErrInvalidConfig.
func FuzzURL(f *testing.F) {
	for _, s := range []string{
		"postgres://u@h/db?sslmode=disable", "postgres://u:p@h/db?concurrency=4&lease=5s&consumer_group=g",
		"postgres://h/db?bogus=1&lease=soon", "postgres://h/db?max_conns=1", "postgres://h/db?schema=Bad-Schema",
		"postgres://h/db?table_prefix=x&manual_schema=true&application_name=a", "postgres://h/db?sslmode=disable&sslmode=require",
		"postgres://h/db?max_message_size=0&ttl=-1s&delay=1h", "postgres://h/db?sweep_interval=-1&fetch_timeout=1s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		u.Scheme, u.Host = "postgres", "127.0.0.1:1"
		ctx := context.Background()
		if s, err := transport.OpenSubscriber(ctx, u.String()); err == nil {
			_ = s.Close()
		} else if !errors.Is(err, transport.ErrInvalidConfig) {
			t.Fatalf("OpenSubscriber(%q): %v is not ErrInvalidConfig", u, err)
		}
		if p, err := transport.OpenPublisher(ctx, u.String()); err == nil {
			_ = p.Close()
		} else if !errors.Is(err, transport.ErrInvalidConfig) {
			t.Fatalf("OpenPublisher(%q): %v is not ErrInvalidConfig", u, err)
		}
	})
}
