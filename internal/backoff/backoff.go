// Package backoff is Berth's one exponential backoff with jitter: every
// retry loop (the receive loop's error delay, SQS settlement retries, the
// wake-up listener's reconnects, statement retries) draws its waits here.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy doubles a wait from Base up to Max. The zero value never waits.
type Policy struct {
	Base time.Duration // the first wait
	Max  time.Duration // the cap; zero means Base (no growth)
}

// Delay returns the wait before retry n (n = 0 for the first retry):
// Base·2ⁿ capped at Max, jittered to [d/2, d] so that many clients that
// failed together do not retry together.
func (p Policy) Delay(n int) time.Duration {
	return Half(p.Ceiling(n))
}

// Ceiling returns Base·2ⁿ capped at Max, without jitter.
func (p Policy) Ceiling(n int) time.Duration {
	ceiling := max(p.Max, p.Base)
	d := p.Base
	for i := 0; i < n && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// Next returns the jittered wait that follows a previous un-jittered
// ceiling prev (zero for the first), and the new ceiling to pass next time.
// It suits loops that keep their state as the last wait rather than a count.
func (p Policy) Next(prev time.Duration) (wait, ceiling time.Duration) {
	ceiling = p.Base
	if prev > 0 {
		ceiling = prev * 2
	}
	ceiling = min(ceiling, max(p.Max, p.Base))
	return Half(ceiling), ceiling
}

// Half returns a random duration in [d/2, d].
func Half(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Spread returns a random duration in [d·3/4, d·5/4] (d ± 25%), for
// periodic work (sweeps, elections) that many instances start together.
func Spread(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d*3/4 + rand.N(d/2+1)
}
