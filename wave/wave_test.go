package wave

import (
	"errors"
	"testing"
	"time"
)

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time                       { return c.now }
func (c *fakeClock) After(time.Duration) <-chan time.Time { return nil }
func (c *fakeClock) advance(d time.Duration)              { c.now = c.now.Add(d) }

func newCtrl(t *testing.T, cfg Config) (*Controller, *fakeClock) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c, err := New(cfg, clk)
	if err != nil {
		t.Fatal(err)
	}
	return c, clk
}

func TestFirstWaveIsOneProbe(t *testing.T) {
	c, _ := newCtrl(t, Config{})
	if got := c.Next(100); got != 1 {
		t.Fatalf("first wave = %d, want 1", got)
	}
}

func TestDoublesWhileEveryProbeFinds(t *testing.T) {
	c, _ := newCtrl(t, Config{Cap: 64})
	want := []int{1, 2, 4, 8, 16, 32, 64, 64, 64}
	for i, w := range want {
		n := c.Next(1000)
		if n != w {
			t.Fatalf("wave %d = %d, want %d", i, n, w)
		}
		if d := c.Observe(n, n); d != 0 {
			t.Fatalf("full wave must not wait, got %s", d)
		}
	}
}

func TestPartialWaveSetsObservedAvailabilityWithoutBackoff(t *testing.T) {
	c, _ := newCtrl(t, Config{})
	for _, n := range []int{1, 2, 4, 8} {
		if got := c.Next(1000); got != n {
			t.Fatalf("ramp = %d, want %d", got, n)
		}
		c.Observe(n, n)
	}
	if got := c.Next(1000); got != 16 {
		t.Fatalf("wave = %d, want 16", got)
	}
	if d := c.Observe(16, 5); d != 0 {
		t.Fatalf("partial wave waited %s, want no backoff", d)
	}
	if got := c.Next(1000); got != 5 {
		t.Fatalf("after partial wave = %d, want observed availability 5", got)
	}
	// From the observed availability it doubles again when full.
	c.Observe(5, 5)
	if got := c.Next(1000); got != 10 {
		t.Fatalf("after full wave of 5 = %d, want 10", got)
	}
}

func TestEmptyWaveResetsAndWaitsEmptyDelay(t *testing.T) {
	c, _ := newCtrl(t, Config{EmptyDelay: 750 * time.Millisecond})
	c.Observe(1, 1)
	c.Observe(2, 2)
	if got := c.Next(1000); got != 4 {
		t.Fatalf("wave = %d, want 4", got)
	}
	if d := c.Observe(4, 0); d != 750*time.Millisecond {
		t.Fatalf("empty wave delay = %s, want 750ms", d)
	}
	if got := c.Next(1000); got != 1 {
		t.Fatalf("after empty wave = %d, want one probe", got)
	}
}

func TestNegativeEmptyDelayMeansNoWait(t *testing.T) {
	c, _ := newCtrl(t, Config{EmptyDelay: -1})
	if d := c.Observe(1, 0); d != 0 {
		t.Fatalf("delay = %s, want 0 for long-polling sources", d)
	}
}

func TestCapIsConfigurable(t *testing.T) {
	c, _ := newCtrl(t, Config{Cap: 5})
	for range 10 {
		n := c.Next(1000)
		if n > 5 {
			t.Fatalf("wave %d exceeds cap 5", n)
		}
		c.Observe(n, n)
	}
	if got := c.Next(1000); got != 5 {
		t.Fatalf("wave = %d, want the cap 5", got)
	}
	if d := DefaultCap; d != 64 {
		t.Fatalf("DefaultCap = %d, want 64", d)
	}
}

func TestNeverExceedsFreeSpace(t *testing.T) {
	c, _ := newCtrl(t, Config{})
	for range 6 {
		n := c.Next(1000)
		c.Observe(n, n)
	}
	if got := c.Next(64); got != 64 {
		t.Fatalf("wave = %d, want 64", got)
	}
	if got := c.Next(3); got != 3 {
		t.Fatalf("wave with 3 free = %d, want 3", got)
	}
	if got := c.Next(0); got != 0 {
		t.Fatalf("wave with no free space = %d, want 0", got)
	}
	if got := c.Next(-2); got != 0 {
		t.Fatalf("wave with negative free space = %d, want 0", got)
	}
}

func TestOneProbeAfterIdle(t *testing.T) {
	c, clk := newCtrl(t, Config{IdleAfter: 5 * time.Second})
	for range 4 {
		n := c.Next(1000)
		c.Observe(n, n)
	}
	if got := c.Next(1000); got != 16 {
		t.Fatalf("wave = %d, want 16", got)
	}
	clk.advance(4 * time.Second)
	if got := c.Next(1000); got != 16 {
		t.Fatalf("after 4s = %d, want 16 (not idle yet)", got)
	}
	clk.advance(time.Second)
	if got := c.Next(1000); got != 1 {
		t.Fatalf("after idle = %d, want one probe", got)
	}
}

func TestValidate(t *testing.T) {
	_, err := New(Config{Cap: -1, IdleAfter: -time.Second}, nil)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"Cap", "IdleAfter"} {
		if !contains(err.Error(), field) {
			t.Fatalf("error %q does not name %s", err, field)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// Defaults applied twice (a pipeline config, then the controller) must not
// turn "no wait" back into the default delay.
func TestNoWaitSurvivesDefaultsTwice(t *testing.T) {
	cfg := Config{EmptyDelay: -1}.WithDefaults().WithDefaults()
	c, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Observe(1, 0); d != 0 {
		t.Fatalf("delay = %s, want 0", d)
	}
}

func TestHintRaisesTheNextWave(t *testing.T) {
	c, _ := newCtrl(t, Config{Cap: 16})
	c.Observe(1, 0) // empty: back to one probe
	c.Hint(10)
	if got := c.Next(100); got != 10 {
		t.Fatalf("after a hint of 10 = %d, want 10", got)
	}
	c.Hint(1000)
	if got := c.Next(100); got != 16 {
		t.Fatalf("hint above the cap = %d, want 16", got)
	}
	c.Hint(0)
	if got := c.Next(3); got != 3 {
		t.Fatalf("free space still bounds a hinted wave: %d", got)
	}
}
