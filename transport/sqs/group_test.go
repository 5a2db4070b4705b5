package sqs

import (
	"errors"
	"net/url"
	"testing"

	"github.com/berth-go/berth/transport"
)

// transport.WithConsumerGroup sets SubscriberConfig.ConsumerGroup (so the
// queue is "<topic>-<group>"), agrees with the same consumer_group in the
// URL, and conflicts with another.
func TestSubscriberConfigConsumerGroup(t *testing.T) {
	for _, c := range []struct {
		query, option, want string
		conflict            bool
	}{
		{"", "billing", "billing", false},
		{"&consumer_group=billing", "billing", "billing", false},
		{"&consumer_group=audit", "", "audit", false},
		{"&consumer_group=audit", "billing", "", true},
	} {
		u, err := url.Parse("sqs://test:test@127.0.0.1:1?region=us-east-1" + c.query)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := subscriberConfig(u, transport.Options{ConsumerGroup: c.option})
		if c.conflict {
			if !errors.Is(err, transport.ErrInvalidConfig) {
				t.Errorf("%q + %q: err = %v, want ErrInvalidConfig", c.query, c.option, err)
			}
			continue
		}
		if err != nil || cfg.ConsumerGroup != c.want {
			t.Errorf("%q + %q: group %q, err %v; want %q", c.query, c.option, cfg.ConsumerGroup, err, c.want)
		}
	}
}
