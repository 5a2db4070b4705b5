// Package sqlurl reads the SQL queue tables' URL query parameters into
// sqlqueue's configs, for the postgres, sqlite and sqlserver URL parsers and
// the inspect tools. It is internal so that no exported method takes the
// internal urlparam type.
package sqlurl

import (
	"slices"
	"strings"
	"time"

	"github.com/berth-go/berth/internal/pipeurl"
	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// Tables reads schema, table_prefix and manual_schema from p.
func Tables(p *urlparam.Params, t *sqlqueue.Tables) {
	if p.Has("schema") {
		t.Schema = p.String("schema", t.Schema)
	}
	t.Prefix = p.String("table_prefix", t.Prefix)
	t.ManualSchema = p.Bool("manual_schema", t.ManualSchema)
}

// Subscriber reads the subscriber's URL parameters from p: the pipeline's
// (see pipeurl.Parse), the tables', and consumer_group,
// lease, fetch_timeout, sweep_interval, wake_debounce, idle_probe_max,
// claim_timeout,
// settle_linger, ack_hold, fleet_interval, parked_retention. One URL serves both sides, so the
// publisher's parameters (see Publisher) are accepted too: checked, then
// ignored.
// Dialect drivers call it; problems are recorded in p.
func Subscriber(p *urlparam.Params, c *sqlqueue.SubscriberConfig) {
	subscriber(p, c)
	publisher(p, new(sqlqueue.PublisherConfig))
}

func subscriber(p *urlparam.Params, c *sqlqueue.SubscriberConfig) {
	pipeurl.Parse(p, &c.Pipeline)
	Tables(p, &c.Tables)
	c.ConsumerGroup = p.String("consumer_group", c.ConsumerGroup)
	c.Lease = p.Duration("lease", c.Lease, time.Second, 24*time.Hour)
	c.FetchTimeout = p.Duration("fetch_timeout", c.FetchTimeout, time.Second, 24*time.Hour)
	c.SweepInterval = p.Duration("sweep_interval", c.SweepInterval, -1, 24*time.Hour)
	c.WakeDebounce = p.Duration("wake_debounce", c.WakeDebounce, -1, time.Second)
	c.IdleProbeMax = p.Duration("idle_probe_max", c.IdleProbeMax, -1, time.Hour)
	c.ClaimTimeout = p.Duration("claim_timeout", c.ClaimTimeout, 100*time.Millisecond, time.Hour)
	c.SettleLinger = p.Duration("settle_linger", c.SettleLinger, -1, time.Second)
	c.AckHold = p.Duration("ack_hold", c.AckHold, -1, time.Second)
	c.FleetInterval = p.Duration("fleet_interval", c.FleetInterval, 0, time.Hour)
	c.ParkedRetention = p.Duration("parked_retention", c.ParkedRetention, -10*365*24*time.Hour, 10*365*24*time.Hour)
}

// Publisher reads the publisher's URL parameters from p: the tables', and
// max_message_size, delay, ttl, subscriptions_ttl, notify_window, groups
// (topic:group pairs separated by commas, see Groups). One URL
// serves both sides, so the subscriber's parameters (see
// Subscriber) are accepted too: checked, then ignored.
func Publisher(p *urlparam.Params, c *sqlqueue.PublisherConfig) {
	publisher(p, c)
	subscriber(p, new(sqlqueue.SubscriberConfig))
}

func publisher(p *urlparam.Params, c *sqlqueue.PublisherConfig) {
	Tables(p, &c.Tables)
	c.MaxMessageSize = p.Int("max_message_size", c.MaxMessageSize, 1, 1<<30)
	c.Delay = p.Duration("delay", c.Delay, 0, 365*24*time.Hour)
	c.TTL = p.Duration("ttl", c.TTL, 0, 365*24*time.Hour)
	c.SubscriptionsTTL = p.Duration("subscriptions_ttl", c.SubscriptionsTTL, -1, time.Hour)
	c.NotifyWindow = p.Duration("notify_window", c.NotifyWindow, -1, time.Second)
	if p.Has("groups") {
		c.Groups = Groups(p, p.String("groups", ""))
	}
}

// Groups reads topic:group pairs separated by commas (the groups
// parameter, the syntax of berth migrate --queue) into a map from topic to
// groups; topic "*" is every topic. Problems are recorded in p.
func Groups(p *urlparam.Params, s string) map[string][]string {
	m := map[string][]string{}
	for _, pair := range strings.Split(s, ",") {
		topic, group, ok := strings.Cut(strings.TrimSpace(pair), ":")
		if !ok || topic == "" || group == "" {
			p.Fail("groups", "%q is not topic:group", pair)
			continue
		}
		if !slices.Contains(m[topic], group) {
			m[topic] = append(m[topic], group)
		}
	}
	return m
}
