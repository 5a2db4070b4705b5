package transport

import "time"

// Clock is Berth's one time source: the receive pipeline's waits, the wave
// controller's ramp and the health handler's ages all read it, so a test
// can inject a fake. [WallClock] is the real one.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// WallClock is the Clock of the time package.
var WallClock Clock = wallClock{}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
