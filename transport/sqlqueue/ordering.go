package sqlqueue

import (
	"bytes"
	"encoding/json"

	"github.com/berth-go/berth/transport"
)

// QueueUpgrader is implemented by dialects that cannot bring an existing
// queue table to the current columns with idempotent DDL alone (SQLite:
// ALTER TABLE … ADD COLUMN has no IF NOT EXISTS). When it creates or
// checks a queue, the engine runs each upgrade's probe, in order, under
// the schema lock, and the upgrade's statements when the probe answers
// true, before CreateQueue's.
//
// The other dialects upgrade in CreateQueue itself (PostgreSQL's ADD
// COLUMN IF NOT EXISTS, SQL Server's upgradeQueue batch) and in their
// schema migrations.
type QueueUpgrader interface {
	// UpgradeQueue returns q's upgrades, oldest first.
	UpgradeQueue(q Queue) []QueueUpgrade
}

// A QueueUpgrade is one step of a queue table's upgrade.
type QueueUpgrade struct {
	// Probe answers one row with one boolean: true when q's table exists
	// and lacks what Upgrade adds.
	Probe Stmt
	// Upgrade adds it.
	Upgrade []Stmt
}

// orderingKeyField is how the ordering key's metadata key appears in a
// row's headers (a JSON object).
var orderingKeyField = []byte(`"` + transport.MetadataOrderingKey + `":`)

// hasOrderingKey reports whether headers (a row's JSON metadata) hold an
// ordering key. A false positive (a value that contains the key's name)
// costs one needless wake-up.
func hasOrderingKey(headers []byte) bool { return bytes.Contains(headers, orderingKeyField) }

// orderingKeyOf returns the ordering key in a row's headers (a JSON object
// of metadata), or "" when it has none or the headers are not such an
// object (Map reports those).
//
// Every claimed row of a keyed queue needs its key (for the hand-off),
// long before Map decodes the headers. A decode into a map for it cost
// about 2.5 µs and a map per row. scanOrderingKey reads the object in
// place, as scanHeaders does, and hands what it does not read exactly to
// json.Unmarshal, so the result is the decode's whenever hasOrderingKey's
// filter passes (FuzzOrderingKeyOf).
func orderingKeyOf(headers []byte) string {
	if !hasOrderingKey(headers) {
		return ""
	}
	if key, ok := scanOrderingKey(headers); ok {
		return key
	}
	var md map[string]string
	if json.Unmarshal(headers, &md) != nil {
		return ""
	}
	return md[transport.MetadataOrderingKey]
}

// unblocked is told of ds, just settled (completed or dead-lettered): the
// next row of each one's ordering key is claimable now, and no insert,
// release or recovery sent a wake-up for it. This source takes those rows
// itself when its dialect can claim by key (freeKey, handoff.go);
// otherwise it wakes the pool's sources of this queue, so that one which
// skipped its claim after a short one (see Claim) or parked does not wait
// for its next poll. Other processes find the rows at their next poll or
// probe.
func (s *Source) unblocked(ds ...*transport.Delivery) {
	var (
		keys []string
		from []int64
	)
	for _, d := range ds {
		if h := handleOf(d); h.key != "" {
			keys, from = append(keys, h.key), append(from, h.ref.ID)
		}
	}
	if len(keys) > 0 && !s.freeKey(keys, from) {
		localWake.notify(wakeKey{s.e.db, s.q.Name})
	}
}
