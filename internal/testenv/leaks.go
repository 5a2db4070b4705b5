package testenv

import "go.uber.org/goleak"

// WatermillSuiteLeaks are goleak options for packages that run Watermill's
// universal suite (tests.TestPubSub). Its consumer-group tests read through
// a subscriber multiplier (watermill/internal/subscriber) whose forwarding
// goroutines send each message on an unbuffered channel that the test stops
// reading once it has every message it expected: a late redelivery (likely
// when the machine is loaded and an ack races the visibility timeout or
// lease) leaves that goroutine blocked for good, with nothing of Berth's
// involved. Only goroutines running those two functions are ignored, wherever
// they block (a channel send, or a sync.WaitGroup.Wait on the goroutines
// they started, as the stack shows with Go 1.26); every goroutine of Berth's
// is still checked.
var WatermillSuiteLeaks = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill/internal/subscriber.(*multiplier).Subscribe.func2"),
	goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill/internal/subscriber.(*multiplier).Subscribe.func3"),
}
