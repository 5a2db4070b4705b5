package sqlurl

import (
	"net/url"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The subscriber's parameters land in their fields, the publisher's are
// accepted and checked on the same URL, and an unknown one is refused.
func TestSubscriberReadsBothSides(t *testing.T) {
	var c sqlqueue.SubscriberConfig
	p := urlparam.New(url.Values{"idle_probe_max": {"2s"}, "concurrency": {"7"}, "schema": {"app"}, "notify_window": {"5ms"}})
	Subscriber(p, &c)
	if err := p.Err(); err != nil || c.IdleProbeMax != 2*time.Second || c.Pipeline.Concurrency != 7 || c.Tables.Schema != "app" {
		t.Fatalf("got IdleProbeMax %s, Concurrency %d, Schema %q, err %v", c.IdleProbeMax, c.Pipeline.Concurrency, c.Tables.Schema, err)
	}
	p = urlparam.New(url.Values{"notify_window": {"1h"}})
	Subscriber(p, &c)
	if p.Err() == nil {
		t.Fatal("notify_window=1h (publisher side, out of range) accepted by the subscriber's parse")
	}
}

func TestPublisherReadsItsOwn(t *testing.T) {
	var c sqlqueue.PublisherConfig
	p := urlparam.New(url.Values{"notify_window": {"5ms"}, "table_prefix": {"x_"}, "lease": {"30s"}})
	Publisher(p, &c)
	if err := p.Err(); err != nil || c.NotifyWindow != 5*time.Millisecond || c.Tables.Prefix != "x_" {
		t.Fatalf("got NotifyWindow %s, Prefix %q, err %v", c.NotifyWindow, c.Tables.Prefix, err)
	}
}
