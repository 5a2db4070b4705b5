// Package faults injects panics and errors at named points of the pipeline,
// for tests and the chaos harness. With no injector installed every Hit is a
// single atomic load.
package faults

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Point names a place in the pipeline where a fault can be injected.
type Point string

// The injection points.
const (
	Receive    Point = "receive"     // the receive loop's Claim
	Map        Point = "map"         // mapping a delivery to a message
	Deliver    Point = "deliver"     // handing a message to Watermill
	Ack        Point = "ack"         // settling an ack (Complete)
	Nack       Point = "nack"        // settling a nack (Retry)
	DeadLetter Point = "dead-letter" // dead-lettering
	Release    Point = "release"     // releasing prefetched deliveries
	Log        Point = "log"         // writing a log line
)

// Points lists every injection point.
var Points = []Point{Receive, Map, Deliver, Ack, Nack, DeadLetter, Release, Log}

type rule struct {
	skip  int // hits to let pass before injecting
	panic bool
	err   error
	left  int // remaining hits; < 0 means unlimited
}

// Injector holds the faults to inject.
type Injector struct {
	mu    sync.Mutex
	rules map[Point]*rule
	hits  map[Point]int
}

var current atomic.Pointer[Injector]

// Install makes i the process-wide injector and returns a function that
// removes it. Tests that install one must not run in parallel with each other.
func Install(i *Injector) (uninstall func()) {
	current.Store(i)
	return func() { current.CompareAndSwap(i, nil) }
}

// New returns an empty injector.
func New() *Injector {
	return &Injector{rules: map[Point]*rule{}, hits: map[Point]int{}}
}

// Panic makes the next times hits of p panic (times < 0: every hit).
func (i *Injector) Panic(p Point, times int) *Injector {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rules[p] = &rule{panic: true, left: times}
	return i
}

// Error makes the next times hits of p return err (times < 0: every hit).
func (i *Injector) Error(p Point, err error, times int) *Injector {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rules[p] = &rule{err: err, left: times}
	return i
}

// Skip lets the next n hits of p pass before its rule injects anything.
func (i *Injector) Skip(p Point, n int) *Injector {
	i.mu.Lock()
	defer i.mu.Unlock()
	if r := i.rules[p]; r != nil {
		r.skip = n
	}
	return i
}

// Hits returns how many faults were injected at p.
func (i *Injector) Hits(p Point) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.hits[p]
}

// Injected is the value of an injected panic and the error of an injected
// error when none was given.
type Injected struct{ Point Point }

// Error names the injection point.
func (e *Injected) Error() string { return fmt.Sprintf("faults: injected at %s", e.Point) }

// Hit is called by the pipeline at p. It returns nil, returns an injected
// error, or panics with an injected *Injected.
func Hit(p Point) error {
	i := current.Load()
	if i == nil {
		return nil
	}
	i.mu.Lock()
	r := i.rules[p]
	if r == nil || r.left == 0 {
		i.mu.Unlock()
		return nil
	}
	if r.skip > 0 {
		r.skip--
		i.mu.Unlock()
		return nil
	}
	if r.left > 0 {
		r.left--
	}
	i.hits[p]++
	i.mu.Unlock()
	if r.panic {
		panic(&Injected{Point: p})
	}
	if r.err != nil {
		return r.err
	}
	return &Injected{Point: p}
}
