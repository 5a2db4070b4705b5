package due

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestSetKeepsTheEarliestFirst(t *testing.T) {
	var s Set
	if _, ok := s.Next(); ok {
		t.Fatal("empty set has a next time")
	}
	base := time.Unix(1000, 0)
	var all []time.Time
	for i := range 200 {
		at := base.Add(time.Duration(rand.IntN(1000)) * time.Millisecond)
		want := len(all) == 0 || at.Before(slices.MinFunc(all, func(a, b time.Time) int { return a.Compare(b) }))
		all = append(all, at)
		earliest := slices.MinFunc(all, func(a, b time.Time) int { return a.Compare(b) })
		if got := s.Add(at); got != want {
			t.Fatalf("Add #%d reported earliest %v, want %v", i, got, want)
		}
		if n, _ := s.Next(); !n.Equal(earliest) {
			t.Fatalf("Next = %v, want %v", n, earliest)
		}
	}
	cut := base.Add(500 * time.Millisecond)
	s.DropUntil(cut)
	var left []time.Time
	for _, at := range all {
		if at.After(cut) {
			left = append(left, at)
		}
	}
	if s.Len() != len(left) {
		t.Fatalf("Len after DropUntil = %d, want %d", s.Len(), len(left))
	}
	slices.SortFunc(left, func(a, b time.Time) int { return a.Compare(b) })
	left = slices.CompactFunc(left, func(a, b time.Time) bool { return a.Equal(b) })
	for _, want := range left {
		got, ok := s.Next()
		if !ok || !got.Equal(want) {
			t.Fatalf("Next = %v, %v; want %v", got, ok, want)
		}
		s.DropUntil(got)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after dropping everything", s.Len())
	}
}

func TestSetDropsBeyondCap(t *testing.T) {
	var s Set
	at := time.Unix(1000, 0)
	for range Cap {
		s.Add(at)
	}
	if s.Add(at.Add(-time.Second)) {
		t.Fatal("a full set took another time")
	}
	if s.Len() != Cap {
		t.Fatalf("Len = %d, want %d", s.Len(), Cap)
	}
}
