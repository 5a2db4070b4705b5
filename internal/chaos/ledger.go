package chaos

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Ledger records every publish and every successful handling of a run, by
// message id, and what the broker dead-lettered. It is safe for concurrent
// use.
type Ledger struct {
	mu           sync.Mutex
	published    map[string]bool // id → poison
	handled      map[string]int  // id → successful handlings
	dead         map[string]int  // id → dead-letter records at the broker
	lastHandled  time.Time
	handledTotal int
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{published: map[string]bool{}, handled: map[string]int{}, dead: map[string]int{}}
}

// Published records that the broker accepted message id.
func (l *Ledger) Published(id string, poison bool) {
	l.mu.Lock()
	l.published[id] = poison
	l.mu.Unlock()
}

// Handled records one successful handling of id (the handler returned
// success; the ack may still fail, which makes a later duplicate).
func (l *Ledger) Handled(id string) {
	l.mu.Lock()
	l.handled[id]++
	l.handledTotal++
	l.lastHandled = time.Now()
	l.mu.Unlock()
}

// DeadLettered records that the broker holds a dead-letter record of id.
func (l *Ledger) DeadLettered(id string) {
	l.mu.Lock()
	l.dead[id]++
	l.mu.Unlock()
}

// Progress returns the number of distinct ids handled and of handlings.
func (l *Ledger) Progress() (distinct, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.handled), l.handledTotal
}

// Outstanding returns how many published messages are neither handled nor
// (for poison messages) dead-lettered yet.
func (l *Ledger) Outstanding() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for id, poison := range l.published {
		if poison {
			continue // poison is settled by the dead-letter count at the end
		}
		if l.handled[id] == 0 {
			n++
		}
	}
	return n
}

// Counts is the ledger's verdict.
type Counts struct {
	Published     int // distinct ids the broker accepted
	Poison        int // of which poison (always nacked)
	Handled       int // distinct ids handled at least once
	Handlings     int // successful handlings in all
	Duplicates    int // Handlings − Handled
	Lost          int // published, not poison, never handled
	DeadLettered  int // distinct ids dead-lettered
	DeadPoison    int // poison ids dead-lettered
	DeadNonPoison int // ids dead-lettered that were not poison
	PoisonMissing int // poison ids neither dead-lettered
	PoisonHandled int // poison ids handled (must be 0)
	Unknown       int // handled or dead-lettered ids never published
	LostSample    []string
}

// Counts computes the verdict.
func (l *Ledger) Counts() Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	var c Counts
	c.Published = len(l.published)
	for id, poison := range l.published {
		if poison {
			c.Poison++
			if l.dead[id] > 0 {
				c.DeadPoison++
			} else {
				c.PoisonMissing++
			}
			if l.handled[id] > 0 {
				c.PoisonHandled++
			}
			continue
		}
		if l.handled[id] == 0 && l.dead[id] == 0 {
			c.Lost++
			if len(c.LostSample) < 10 {
				c.LostSample = append(c.LostSample, id)
			}
		}
	}
	for id, n := range l.handled {
		c.Handled++
		c.Handlings += n
		if _, ok := l.published[id]; !ok {
			c.Unknown++
		}
	}
	for id := range l.dead {
		c.DeadLettered++
		poison, ok := l.published[id]
		switch {
		case !ok:
			c.Unknown++
		case !poison:
			c.DeadNonPoison++
		}
	}
	c.Duplicates = c.Handlings - c.Handled
	slices.Sort(c.LostSample)
	return c
}

// FaultRecord is one injected fault and what followed it.
type FaultRecord struct {
	Kind     Kind
	Detail   string
	At       time.Time     // injected
	Ended    time.Time     // the fault condition was removed
	Recovery time.Duration // from Ended until progress resumed with every listener healthy; < 0: not observed
	Health   []string      // the distinct health reasons seen from At until recovery
}

// notReached is the detail of a Berth injection point that was armed but
// not hit while armed (release only runs when buffered deliveries are
// handed back).
const notReached = "not reached"

// Report is the outcome of one run.
type Report struct {
	Transport     string
	Seed          uint64 // the fault schedule's seed
	Messages      int
	Instances     int
	Duration      time.Duration // of the fault phase
	Elapsed       time.Duration // whole run
	Counts        Counts
	Faults        []FaultRecord
	Leftover      int   // rows or messages left at the broker after the run (must be 0)
	Rebuilds      int64 // receiver rebuilds observed
	Restarts      int   // instances killed and restarted
	HandlerErrs   int64 // injected handler errors
	HandlerPanics int64
	DupBound      int          // the duplicates allowed by the faults injected
	Effects       EffectCounts // with Config.Effects: the exactly-once check
	Problems      []string
}

// OK reports whether the run proved no loss: nothing lost, every poison
// message dead-lettered and nothing else, nothing left over, and duplicates
// within their bound.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

func (r *Report) check() {
	c := r.Counts
	if c.Lost > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("lost %d messages (e.g. %s)", c.Lost, strings.Join(c.LostSample, ", ")))
	}
	if c.DeadPoison != c.Poison || c.DeadNonPoison != 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("dead-lettered %d poison of %d and %d non-poison", c.DeadPoison, c.Poison, c.DeadNonPoison))
	}
	if c.PoisonHandled > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d poison messages were handled", c.PoisonHandled))
	}
	if c.Unknown > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d ids handled or dead-lettered were never published", c.Unknown))
	}
	if r.Leftover != 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d rows/messages left at the broker after the run", r.Leftover))
	}
	if e := r.Effects; e.Checked && e.Missing+e.Twice+e.Poison > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("effects: %d never applied, %d applied twice or more, %d poison applied (e.g. %s)",
			e.Missing, e.Twice, e.Poison, strings.Join(e.Sample, ", ")))
	}
	if c.Duplicates > r.DupBound {
		r.Problems = append(r.Problems, fmt.Sprintf("%d duplicates exceed the bound %d", c.Duplicates, r.DupBound))
	}
}

// Print writes the ledger as a table.
func (r *Report) Print(w io.Writer) {
	c := r.Counts
	fmt.Fprintf(w, "== berth chaos ledger: %s (seed %d) ==\n", r.Transport, r.Seed)
	fmt.Fprintf(w, "messages published   %d (poison %d)\n", c.Published, c.Poison)
	fmt.Fprintf(w, "subscriber instances %d (killed and restarted %d)\n", r.Instances, r.Restarts)
	fmt.Fprintf(w, "fault phase          %s (run %s)\n", r.Duration.Round(time.Second), r.Elapsed.Round(time.Second))
	fmt.Fprintf(w, "handled (distinct)   %d\n", c.Handled)
	fmt.Fprintf(w, "lost                 %d\n", c.Lost)
	fmt.Fprintf(w, "duplicates           %d (bound %d; %.3f%% of handlings)\n", c.Duplicates, r.DupBound, pct(c.Duplicates, c.Handlings))
	fmt.Fprintf(w, "dead-lettered        %d (poison %d of %d, non-poison %d)\n", c.DeadLettered, c.DeadPoison, c.Poison, c.DeadNonPoison)
	fmt.Fprintf(w, "left at broker       %d\n", r.Leftover)
	if e := r.Effects; e.Checked {
		fmt.Fprintf(w, "effects exactly once %d (never %d, twice or more %d, poison %d)\n", e.Once, e.Missing, e.Twice, e.Poison)
	}
	fmt.Fprintf(w, "handler errors       %d, panics %d\n", r.HandlerErrs, r.HandlerPanics)
	fmt.Fprintf(w, "receiver rebuilds    %d\n", r.Rebuilds)

	byKind := map[Kind][]FaultRecord{}
	for _, f := range r.Faults {
		byKind[f.Kind] = append(byKind[f.Kind], f)
	}
	kinds := make([]Kind, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	fmt.Fprintf(w, "faults injected      %d\n", len(r.Faults))
	fmt.Fprintf(w, "  %-22s %5s %5s %10s %10s %7s  %s\n", "kind", "count", "fired", "rec p50", "rec max", "unrecov", "health seen")
	for _, k := range kinds {
		fs := byKind[k]
		var recs []time.Duration
		unrec, fired := 0, 0
		reasons := map[string]bool{}
		for _, f := range fs {
			if f.Detail != notReached {
				fired++
			}
			if f.Recovery < 0 {
				unrec++
			} else {
				recs = append(recs, f.Recovery)
			}
			for _, h := range f.Health {
				reasons[h] = true
			}
		}
		slices.Sort(recs)
		p50, pmax := "-", "-"
		if len(recs) > 0 {
			p50 = recs[len(recs)/2].Round(time.Millisecond).String()
			pmax = recs[len(recs)-1].Round(time.Millisecond).String()
		}
		hs := make([]string, 0, len(reasons))
		for h := range reasons {
			hs = append(hs, h)
		}
		slices.Sort(hs)
		fmt.Fprintf(w, "  %-22s %5d %5d %10s %10s %7d  %s\n", k, len(fs), fired, p50, pmax, unrec, strings.Join(hs, ","))
	}
	if r.OK() {
		fmt.Fprintf(w, "verdict              OK: no loss\n")
	} else {
		for _, p := range r.Problems {
			fmt.Fprintf(w, "PROBLEM              %s\n", p)
		}
	}
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
