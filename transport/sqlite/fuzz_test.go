package sqlite_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/sqlite"
)

// FuzzURL opens subscribers and publishers from sqlite:// URLs with
// arbitrary query parameters (on the in-memory database, so the fuzzer
// creates no files): the driver never panics, and every error it returns
// is ErrInvalidConfig.
func FuzzURL(f *testing.F) {
	for _, s := range []string{
		"", "concurrency=4&lease=5s", "lease=soon&bogus=1", "consumer_group=g&max_attempts=-1",
		"table_prefix=Bad-Prefix", "buffer=0&max_queue=1&restart_queue=5", "wave_cap=0&empty_delay=-1s",
		"max_message_size=0&ttl=-1s", "lease=1s&lease=2s", "sweep_interval=-1&fetch_timeout=1s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, query string) {
		if _, err := url.ParseQuery(query); err != nil {
			return
		}
		raw := "sqlite://" + ":memory:" + "?" + query
		ctx := context.Background()
		if s, err := transport.OpenSubscriber(ctx, raw); err == nil {
			_ = s.Close()
		} else if !errors.Is(err, transport.ErrInvalidConfig) {
			t.Fatalf("OpenSubscriber(%q): %v is not ErrInvalidConfig", raw, err)
		}
		if p, err := transport.OpenPublisher(ctx, raw); err == nil {
			_ = p.Close()
		} else if !errors.Is(err, transport.ErrInvalidConfig) {
			t.Fatalf("OpenPublisher(%q): %v is not ErrInvalidConfig", raw, err)
		}
	})
}
