package backoff

import (
	"testing"
	"time"
)

func TestCeilingDoublesToMax(t *testing.T) {
	p := Policy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	want := []time.Duration{10, 20, 40, 50, 50}
	for n, w := range want {
		if got := p.Ceiling(n); got != w*time.Millisecond {
			t.Errorf("Ceiling(%d) = %v, want %v", n, got, w*time.Millisecond)
		}
	}
	if got := p.Ceiling(1000); got != 50*time.Millisecond {
		t.Errorf("Ceiling(1000) = %v, want the cap", got)
	}
}

func TestDelayIsJitteredWithinHalf(t *testing.T) {
	p := Policy{Base: 8 * time.Millisecond, Max: time.Second}
	for n := range 8 {
		c := p.Ceiling(n)
		for range 200 {
			if d := p.Delay(n); d < c/2 || d > c {
				t.Fatalf("Delay(%d) = %v, outside [%v, %v]", n, d, c/2, c)
			}
		}
	}
}

func TestNextFollowsCeiling(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: 300 * time.Millisecond}
	var c time.Duration
	var got []time.Duration
	for range 4 {
		var w time.Duration
		w, c = p.Next(c)
		if w < c/2 || w > c {
			t.Fatalf("wait %v outside [%v, %v]", w, c/2, c)
		}
		got = append(got, c)
	}
	want := []time.Duration{100, 200, 300, 300}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("ceilings = %v, want %v ms", got, want)
		}
	}
}

func TestZeroPolicyNeverWaits(t *testing.T) {
	var p Policy
	if d := p.Delay(3); d != 0 {
		t.Fatalf("zero policy Delay = %v", d)
	}
}

func TestSpread(t *testing.T) {
	d := 40 * time.Millisecond
	for range 200 {
		if s := Spread(d); s < 30*time.Millisecond || s > 50*time.Millisecond {
			t.Fatalf("Spread(%v) = %v", d, s)
		}
	}
}
