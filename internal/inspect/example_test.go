package inspect_test

import (
	"fmt"
	"time"

	"github.com/berth-go/berth/internal/inspect"
)

// A Filter selects dead letters by queue (or topic), reason and age.
func ExampleFilter_Match() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d := inspect.DeadLetter{ID: "7", Queue: "berth_q_orders", Reason: "nacked on attempt 10 of 10 (MaxAttempts)", FailedAt: now.Add(-2 * time.Hour)}
	f := inspect.Filter{Queue: "orders", Reason: "maxattempts", OlderThan: time.Hour}
	fmt.Println(f.Match(d, now, "orders"))
	f.NewerThan = 30 * time.Minute
	fmt.Println(f.Match(d, now, "orders"))
	// Output:
	// true
	// false
}
