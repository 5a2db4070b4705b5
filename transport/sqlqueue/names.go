package sqlqueue

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxTableName leaves room under PostgreSQL's 63-byte identifier limit for
// index-name suffixes.
const maxTableName = 48

// QueueTableName returns the unquoted queue table name of (topic, group)
// under prefix. A topic (and group) made only of lower-case letters, digits
// and underscores that fits is used as is ("berth_q_orders",
// "berth_q_orders__billing"); anything else is sanitised, shortened and
// suffixed with a hash of the exact topic and group, so distinct pairs never
// share a table.
func QueueTableName(prefix, topic, group string) string {
	raw := topic
	if group != "" {
		raw += "__" + group
	}
	name := prefix + "q_" + raw
	if plain(raw) && !strings.Contains(topic, "__") && len(name) <= maxTableName {
		return name
	}
	var b strings.Builder
	for _, r := range strings.ToLower(raw) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(topic + "\x00" + group))
	hash := hex.EncodeToString(sum[:6])
	keep := maxTableName - len(prefix) - len("q_") - 1 - len(hash)
	s := b.String()
	if len(s) > keep {
		s = s[:keep]
	}
	return prefix + "q_" + s + "_" + hash
}

func qualify(d Dialect, schema, name string) string {
	if schema == "" {
		return d.QuoteIdent(name)
	}
	return d.QuoteIdent(schema) + "." + d.QuoteIdent(name)
}

// NamesFor returns the shared table names for t, quoted by d.
func NamesFor(d Dialect, t Tables) Names {
	t = t.withDefaults()
	n := Names{
		Schema:            t.Schema,
		Prefix:            t.Prefix,
		SubscriptionsName: t.Prefix + "subscriptions",
		ErrorsName:        t.Prefix + "errors",
		VersionName:       t.Prefix + "schema_version",
		ListenersName:     t.Prefix + "listeners",
		PausedName:        t.Prefix + "paused",
	}
	n.Subscriptions = qualify(d, t.Schema, n.SubscriptionsName)
	n.Errors = qualify(d, t.Schema, n.ErrorsName)
	n.Version = qualify(d, t.Schema, n.VersionName)
	n.Listeners = qualify(d, t.Schema, n.ListenersName)
	n.Paused = qualify(d, t.Schema, n.PausedName)
	return n
}

// QueueRef names a queue by what subscribers know it by: a topic and a
// consumer group ("" for the topic's default group). DDL and migration
// tools take them.
type QueueRef struct {
	Topic         string
	ConsumerGroup string
}

// QueueFor returns the queue of (topic, group) for t, quoted by d.
func QueueFor(d Dialect, t Tables, topic, group string) Queue {
	t = t.withDefaults()
	name := QueueTableName(t.Prefix, topic, group)
	return Queue{
		Topic:  topic,
		Group:  group,
		Name:   name,
		Table:  qualify(d, t.Schema, name),
		Errors: qualify(d, t.Schema, t.Prefix+"errors"),
	}
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return s != ""
}

// MessagingSystem returns the messaging.system that package telemetry
// reports for queue tables of dialect d: "berth." and the dialect's Name
// ("berth.postgres", "berth.sqlserver", "berth.sqlite"). The OpenTelemetry
// conventions define no value for a queue kept in database tables, and the
// database's own name (db.system.name) would claim the database's protocol;
// the prefix says the protocol is Berth's.
func MessagingSystem(d Dialect) string { return "berth." + d.Name() }
