// Package orderingtest is the ledger of the ordering-key tests: it records
// what was published per key and every handler run, and checks the
// guarantee of transport.MetadataOrderingKey — per key, handlers run one
// at a time across every instance, in publish order (a retry repeats a
// message in place), and nothing is lost.
package orderingtest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Ledger is safe for concurrent use. Times are a logical clock (one
// atomic counter), so "before" and "after" are exact, whatever the
// scheduler does.
type Ledger struct {
	clock atomic.Int64

	mu        sync.Mutex
	published map[string][]string // key → uuids in publish order
	keyOf     map[string]string   // uuid → key
	runs      map[string][]Run    // key → handler runs in start order
	active    map[string]int      // key → handlers running now
	done      map[string]bool     // uuids handled successfully by a live instance
	overlaps  []string
}

// Run is one handler run of a message.
type Run struct {
	UUID       string
	Instance   int
	Start, End int64
	// OK: the handler returned success.
	OK bool
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{published: map[string][]string{}, keyOf: map[string]string{}, runs: map[string][]Run{},
		active: map[string]int{}, done: map[string]bool{}}
}

// Published records uuids, published in this order with ordering key key,
// after their publish returned. Call it in publish order per key.
func (l *Ledger) Published(key string, uuids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.published[key] = append(l.published[key], uuids...)
	for _, u := range uuids {
		l.keyOf[u] = key
	}
}

// Start records that instance's handler started on uuid. The returned
// function records its end: ok when the handler succeeds, live when the
// instance was not killed meanwhile (a killed instance never acks).
func (l *Ledger) Start(uuid string, instance int) (end func(ok, live bool)) {
	l.mu.Lock()
	key, known := l.keyOf[uuid]
	start := l.clock.Add(1)
	if known && key != "" {
		l.active[key]++
		if n := l.active[key]; n > 1 {
			l.overlaps = append(l.overlaps, fmt.Sprintf("key %q: %s started on instance %d while %d other handler(s) of the key ran", key, uuid, instance, n-1))
		}
	}
	l.mu.Unlock()
	return func(ok, live bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		r := Run{UUID: uuid, Instance: instance, Start: start, End: l.clock.Add(1), OK: ok}
		if known && key != "" {
			l.active[key]--
		}
		l.runs[key] = append(l.runs[key], r)
		if ok && live {
			l.done[uuid] = true
		}
	}
}

// Handled is how many published messages were handled successfully by a
// live instance.
func (l *Ledger) Handled() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.done)
}

// Check reports every violation: a message published but never handled by
// a live instance, an unknown message, two runs of one key overlapping,
// and a key whose runs — consecutive repeats of one message (retries,
// redeliveries) collapsed — are not its publish order. Messages without a
// key ("") are only checked for loss.
func (l *Ledger) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, o := range l.overlaps {
		errs = append(errs, errors.New(o))
	}
	for key, uuids := range l.published {
		for _, u := range uuids {
			if !l.done[u] {
				errs = append(errs, fmt.Errorf("key %q: %s lost (never handled by a live instance)", key, u))
			}
		}
		if key == "" {
			continue
		}
		runs := slices.Clone(l.runs[key])
		slices.SortFunc(runs, func(a, b Run) int { return int(a.Start - b.Start) })
		var seq []string
		for i, r := range runs {
			if i > 0 && r.Start < runs[i-1].End {
				errs = append(errs, fmt.Errorf("key %q: %s (instance %d) started at %d before %s (instance %d) ended at %d",
					key, r.UUID, r.Instance, r.Start, runs[i-1].UUID, runs[i-1].Instance, runs[i-1].End))
			}
			if len(seq) == 0 || seq[len(seq)-1] != r.UUID {
				seq = append(seq, r.UUID)
			}
		}
		if !slices.Equal(seq, uuids) {
			errs = append(errs, fmt.Errorf("key %q: handled in the order %v, published %v", key, l.positions(key, seq), l.positions(key, uuids)))
		}
	}
	for key := range l.runs {
		if _, ok := l.published[key]; !ok {
			errs = append(errs, fmt.Errorf("key %q: handled but never published", key))
		}
	}
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("… and %d more", len(errs)-10))
	}
	return errors.Join(errs...)
}

// positions writes uuids as their indexes in key's publish order.
func (l *Ledger) positions(key string, uuids []string) []int {
	out := make([]int, len(uuids))
	for i, u := range uuids {
		out[i] = slices.Index(l.published[key], u)
	}
	return out
}

// Total is how many messages were recorded as published, keyed or not.
func (l *Ledger) Total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, u := range l.published {
		n += len(u)
	}
	return n
}
