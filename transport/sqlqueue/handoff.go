package sqlqueue

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/berth-go/berth/transport"
)

// Hand-off of an ordering key's next row.
//
// While a key's head is fetched or processing, its later rows are blocked
// (see Dialect.Claim). When the source holding the head settles it
// (acknowledged, dead-lettered), the key's next row becomes claimable, but
// nothing announced it: no insert, no release. Waking the pool's sources
// for it (as for a transport without a KeyClaimer, see unblocked) makes
// one of them run a full claim, which with a few hot keys and a deep
// backlog walks every blocked row before it comes back with the one it
// was woken for — measured at 182 msg/s for 10 hot keys on PostgreSQL,
// each key waiting ~55 ms between messages.
//
// With a KeyClaimer, the source that settled the head takes the next row
// itself: it records the key (freed) and kicks its own listener
// (transport.Kicker), whose next claim is ClaimKeys over the freed keys —
// one seek per key — whenever the claim it replaces would have been
// skipped anyway (the last claim came back short or the source is parked:
// the rest of the backlog is blocked or absent, see ClaimDirect). An ack
// of a keyed row that would wait for the next claim statement (AckHold)
// kicks at once, so the ack and the next row's claim are one statement
// and one server transaction (ClaimKeys deletes the riding acks, and
// leaves them out of the head check). Claims that are not skipped (a
// drain) take the freed keys' rows in their due order, as before.

// A KeyClaimer is a DirectDialect that can claim the heads of given
// ordering keys.
type KeyClaimer interface {
	DirectDialect
	// ClaimKeys is ClaimDirect over the heads of keys only: for each key,
	// its row with the lowest id, leaving out the done rows, claimed when
	// it is pending, due and not expired, skipping rows locked by
	// concurrent claims; at most n rows, oldest due first, the first
	// direct of them started. done (given only to a dialect that is also an
	// AckRider) are acks the statement deletes as ClaimComplete does,
	// reported the same way (state StateAcked); the claim's head check
	// treats them as deleted.
	ClaimKeys(q Queue, owner int64, keys []string, n, direct int, fetchTimeout, lease time.Duration, done []Ref) Stmt
}

var _ transport.Kicker = (*Source)(nil)

// freedKeys are the ordering keys whose head a source settled and whose
// next row it has not yet looked for.
type freedKeys struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

func (f *freedKeys) add(keys ...string) {
	f.mu.Lock()
	if f.keys == nil {
		f.keys = map[string]struct{}{}
	}
	for _, k := range keys {
		f.keys[k] = struct{}{}
	}
	f.mu.Unlock()
}

// take removes and returns the keys, sorted (one statement text whatever
// the map's order, and stable arguments for tests).
func (f *freedKeys) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.keys) == 0 {
		return nil
	}
	out := make([]string, 0, len(f.keys))
	for k := range f.keys {
		out = append(out, k)
	}
	clear(f.keys)
	slices.Sort(out)
	return out
}

// Kick implements transport.Kicker.
func (s *Source) Kick() <-chan struct{} { return s.kick }

// kickNow asks the listener to claim at once.
func (s *Source) kickNow() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// freeKey records that key's head was settled here: the listener's next
// claim looks for its next row. It reports false when the source hands
// nothing off (its dialect is no KeyClaimer).
func (s *Source) freeKey(keys ...string) bool {
	if s.kc == nil {
		return false
	}
	s.freed.add(keys...)
	s.kickNow()
	return true
}

// orderingKeyOf returns the ordering key in a row's headers (a JSON object
// of metadata), or "" when it has none.
func orderingKeyOf(headers []byte) string {
	if !hasOrderingKey(headers) {
		return ""
	}
	var md map[string]string
	if json.Unmarshal(headers, &md) != nil {
		return "" // Map reports the headers
	}
	return md[transport.MetadataOrderingKey]
}

// claimKeys runs ClaimKeys for keys, carrying the acks waiting for a claim.
// When the statement filled max, the keys it took no row for go back to
// the freed set for the next claim (kicked): it may have stopped short of
// them.
func (s *Source) claimKeys(ctx context.Context, keys []string, max, direct int) ([]*transport.Delivery, error) {
	var riders []*ridingAck
	if s.rider != nil {
		riders = s.rider.take(s.cfg.SettleBatch)
	}
	direct = min(direct, max)
	owner := newOwner()
	st := s.kc.ClaimKeys(s.q, owner, keys, max, direct, s.cfg.FetchTimeout, s.cfg.Lease, ridersRefs(riders))
	ds, started, acked, err := s.runClaim(ctx, st, owner, direct, true)
	if len(riders) > 0 {
		// Their keys' next rows were looked for by this statement: no
		// hand-off again, unless it failed.
		s.settleRiders(riders, acked, err, err == nil)
	}
	if err != nil {
		s.freed.add(keys...)
		return nil, s.claimErr(ctx, err)
	}
	s.contacted()
	s.e.ctrs.keyClaims.Add(1)
	// It ran in place of a claim that would have been skipped (short or
	// parked): the next one still would be, unless woken, and this
	// source's acks may wait for its next claim (holdable).
	s.short.Store(true)
	if len(ds) >= max {
		taken := make(map[string]bool, len(ds))
		for _, d := range ds {
			taken[handleOf(d).key] = true
		}
		var left []string
		for _, k := range keys {
			if !taken[k] {
				left = append(left, k)
			}
		}
		if len(left) > 0 {
			s.freeKey(left...)
		}
	}
	if len(ds) == 0 {
		s.w.idle.Store(true) // the loop now waits: a wake-up candidate
	} else if s.idle != nil {
		s.idle.wake()
	}
	s.claimed(ds, started, direct)
	return ds, nil
}
