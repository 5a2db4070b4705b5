package sqlqueue

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
	// treats them as deleted. from, when not nil, holds for each key the id
	// of a row that headed it (the settled head that freed it): the key
	// has no row with a lower id, so the head's search may start there (a
	// dialect may ignore it).
	ClaimKeys(q Queue, owner int64, keys []string, from []int64, n, direct int, fetchTimeout, lease time.Duration, done []Ref) Stmt
}

// A HeadPromoter is a KeyClaimer whose queue tables carry the waiting
// marker (below): its full claims do not see a waiting row.
type HeadPromoter interface {
	KeyClaimer
	// PromoteHeads clears the waiting marker of rows that head their key
	// (no row of the key has a lower id) and are pending, at most limit;
	// it returns one row per row changed. The sweeper runs it: a waiting
	// row whose predecessors all left by a path without a hand-off (a
	// sweep, an operator's delete, a process that died; one that closes
	// promotes its freed keys' heads itself, see leaveFreedKeys) would
	// otherwise never be claimed by a full claim.
	PromoteHeads(q Queue, limit int) Stmt
}

// The waiting marker.
//
// A HeadPromoter's queue table has a boolean column waiting, and its full
// claim reads an index of pending rows that are not waiting. Insert marks
// a keyed row waiting when an earlier row of its key is still in the
// table, so the rows blocked behind a key's head stay out of the full
// claim's path: with a few hot keys and a deep backlog, a full claim reads
// the rows it takes and the keys' heads, not the backlog (a claim over
// 20,000 blocked rows took about a second). The marker is an index
// optimisation, not the ordering rule: every claim still checks that a
// keyed row heads its key, so a row marked ready too early costs what it
// cost before the marker; and a waiting row that heads its key is taken by
// the hand-off (ClaimKeys ignores the marker and clears it) or, when no
// hand-off comes, released by the sweeper (PromoteHeads).

var _ transport.Kicker = (*Source)(nil)

// freedKeys are the ordering keys whose head a source settled and whose
// next row it has not yet looked for, each with the id of the settled
// head (the key has no lower row: KeyClaimer.ClaimKeys's from) and whether
// it was looked for once already (see claimKeyRows).
type freedKeys struct {
	mu   sync.Mutex
	keys map[string]freedKey
}

type freedKey struct {
	from  int64
	again bool
}

// add records keys[i], freed by the settlement of row from[i] of it.
func (f *freedKeys) add(again bool, keys []string, from []int64) {
	f.mu.Lock()
	if f.keys == nil {
		f.keys = map[string]freedKey{}
	}
	for i, k := range keys {
		v := f.keys[k]
		// Every head's id is a bound; the later head's is the tighter one.
		f.keys[k] = freedKey{from: max(v.from, from[i]), again: v.again || again}
	}
	f.mu.Unlock()
}

// take removes and returns the keys, sorted (one statement text whatever
// the map's order, and stable arguments for tests), their settled heads'
// ids, and the set of those looked for once already.
func (f *freedKeys) take() (keys []string, from []int64, again map[string]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.keys) == 0 {
		return nil, nil, nil
	}
	keys = make([]string, 0, len(f.keys))
	for k, v := range f.keys {
		keys = append(keys, k)
		if v.again {
			if again == nil {
				again = map[string]bool{}
			}
			again[k] = true
		}
	}
	slices.Sort(keys)
	from = make([]int64, len(keys))
	for i, k := range keys {
		from[i] = f.keys[k].from
	}
	clear(f.keys)
	return keys, from, again
}

// leaveFreedKeys hands the keys this closing source freed and did not
// look for (its listener stopped before the hand-off claim) to the other
// sources: their next rows may be waiting, which no full claim reads, so
// it promotes the waiting heads now (HeadPromoter.PromoteHeads, the
// sweeper's statement) instead of leaving them to the next sweep, and
// wakes this process's other sources of the queue.
func (s *Source) leaveFreedKeys(ctx context.Context) error {
	keys, _, _ := s.freed.take()
	if len(keys) == 0 {
		return nil
	}
	defer localWake.notify(wakeKey{s.e.db, s.q.Name})
	hp, ok := s.e.d.(HeadPromoter)
	if !ok {
		return nil
	}
	sctx, cancel := s.stmtCtx(ctx)
	defer cancel()
	if _, err := queryCount(sctx, s.e.db, &s.e.ctrs.sweeps, hp.PromoteHeads(s.q, sweepLimit)); err != nil {
		return fmt.Errorf("sqlqueue: close %s: promote the heads of %d freed key(s); the sweeper will: %w", s.q.Name, len(keys), err)
	}
	return nil
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

// freeKey records that the heads of keys, rows from, were settled here:
// the listener's next claim looks for the keys' next rows. It reports
// false when the source hands nothing off (its dialect is no KeyClaimer).
func (s *Source) freeKey(keys []string, from []int64) bool {
	if s.kc == nil {
		return false
	}
	s.freed.add(false, keys, from)
	s.kickNow()
	return true
}

// claimKeys is the hand-off claim alone (see ClaimDirect): ClaimKeys in
// place of a claim that would have been skipped.
func (s *Source) claimKeys(ctx context.Context, keys []string, from []int64, again map[string]bool, max, direct int) ([]*transport.Delivery, error) {
	ds, started, err := s.claimKeyRows(ctx, keys, from, again, max, direct)
	if err != nil {
		return nil, err
	}
	// The claim it replaced would have been skipped (short or parked): the
	// next one still would be, unless woken, and this source's acks may
	// wait for its next claim (holdable).
	s.short.Store(true)
	if len(ds) == 0 {
		s.w.idle.Store(true) // the loop now waits: a wake-up candidate
	} else if s.idle != nil {
		s.idle.wake()
	}
	s.claimed(ds, started, direct)
	return ds, nil
}

// claimKeyRows runs ClaimKeys for keys, carrying the acks waiting for a
// claim, and returns the rows claimed and how many of them started. The
// keys it took no row for stay freed, for the next claim (kicked), when
// the statement filled max: it may have stopped short of them, and a
// waiting head it did not reach is seen by no full claim. They are looked
// for once more when the statement carried acks: a riding ack's DELETE
// that waited for a concurrent insert of its key (which holds a lock on
// its key's newest row) reads the key in a snapshot without that row,
// which may have gone in waiting; the next statement sees it. again holds
// the keys looked for twice that way already: not looked for a third time.
func (s *Source) claimKeyRows(ctx context.Context, keys []string, from []int64, again map[string]bool, max, direct int) ([]*transport.Delivery, int, error) {
	var riders []*ridingAck
	if s.rider != nil {
		riders = s.rider.take(s.cfg.SettleBatch)
	}
	// A riding ack's key is looked for by the statement its ack rides:
	// settleRiders below hands nothing off for it. Its key was freed when
	// the ack was queued, but an earlier statement may have looked for it
	// before the ack rode, and found the acked row still its key's head.
	keys, from = withRiderKeys(keys, from, riders)
	direct = min(direct, max)
	owner := newOwner()
	st := s.kc.ClaimKeys(s.q, owner, keys, from, max, direct, s.cfg.FetchTimeout, s.cfg.Lease, ridersRefs(riders))
	ds, started, acked, err := s.runClaim(ctx, st, owner, direct, true)
	if len(riders) > 0 {
		// Their keys' next rows were looked for by this statement: no
		// hand-off again, unless it failed.
		s.settleRiders(riders, acked, err, err == nil)
	}
	if err != nil {
		s.freed.add(false, keys, from)
		return nil, 0, s.claimErr(ctx, err)
	}
	s.contacted()
	s.e.ctrs.keyClaims.Add(1)
	if full := len(ds) >= max; full || len(riders) > 0 {
		taken := make(map[string]bool, len(ds))
		for _, d := range ds {
			taken[handleOf(d).key] = true
		}
		var (
			left     []string
			leftFrom []int64
		)
		for i, k := range keys {
			if !taken[k] && (full || !again[k]) {
				left, leftFrom = append(left, k), append(leftFrom, from[i])
			}
		}
		if len(left) > 0 {
			s.freed.add(!full, left, leftFrom)
			s.kickNow()
		}
	}
	return ds, started, nil
}

// withRiderKeys returns keys and from with the ordering keys of riders,
// and their rows' ids, added, sorted by key, each key once.
func withRiderKeys(keys []string, from []int64, riders []*ridingAck) ([]string, []int64) {
	added := false
	for _, a := range riders {
		h := handleOf(a.d)
		if h.key == "" {
			continue
		}
		if i := slices.Index(keys, h.key); i >= 0 {
			from[i] = max(from[i], h.ref.ID)
			continue
		}
		keys, from = append(keys, h.key), append(from, h.ref.ID)
		added = true
	}
	if added {
		type keyFrom struct {
			key  string
			from int64
		}
		kf := make([]keyFrom, len(keys))
		for i := range keys {
			kf[i] = keyFrom{keys[i], from[i]}
		}
		slices.SortFunc(kf, func(a, b keyFrom) int { return strings.Compare(a.key, b.key) })
		for i := range kf {
			keys[i], from[i] = kf[i].key, kf[i].from
		}
	}
	return keys, from
}
