package sqlurl

import (
	"net/url"
	"strings"
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

// groups= declares topic:group pairs ("*" for every topic); a pair without
// both halves is refused naming the parameter; parked_retention is the
// subscriber's, negative allowed.
func TestGroupsAndParkedRetention(t *testing.T) {
	var c sqlqueue.PublisherConfig
	p := urlparam.New(url.Values{"groups": {"orders:billing,orders:shipping, *:audit,orders:billing"}})
	Publisher(p, &c)
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if got := c.Groups; len(got) != 2 || len(got["orders"]) != 2 || got["orders"][1] != "shipping" || len(got["*"]) != 1 || got["*"][0] != "audit" {
		t.Fatalf("Groups = %v", got)
	}
	for _, bad := range []string{"orders", "orders:", ":billing", "a:b,,c:d"} {
		p := urlparam.New(url.Values{"groups": {bad}})
		Publisher(p, new(sqlqueue.PublisherConfig))
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), `"groups"`) {
			t.Errorf("groups=%q: err %v, want one naming groups", bad, err)
		}
	}
	var s sqlqueue.SubscriberConfig
	p = urlparam.New(url.Values{"parked_retention": {"-1s"}, "groups": {"t:g"}})
	Subscriber(p, &s)
	if err := p.Err(); err != nil || s.ParkedRetention != -time.Second {
		t.Fatalf("ParkedRetention %s, err %v", s.ParkedRetention, err)
	}
}
