package sqlurl_test

import (
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/sqlurl"
	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

func TestFleetIntervalURL(t *testing.T) {
	p := urlparam.New(url.Values{"fleet_interval": {"5s"}})
	var c sqlqueue.SubscriberConfig
	sqlurl.Subscriber(p, &c)
	if err := p.Err(); err != nil || c.FleetInterval != 5*time.Second {
		t.Fatalf("fleet_interval=5s: %v, %v", c.FleetInterval, err)
	}
	p = urlparam.New(url.Values{"fleet_interval": {"2h"}})
	sqlurl.Subscriber(p, &c)
	if p.Err() == nil {
		t.Fatal("fleet_interval=2h accepted")
	}
	err := sqlqueue.SubscriberConfig{FleetInterval: time.Millisecond}.Validate()
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("FleetInterval 1ms: %v", err)
	}
}
