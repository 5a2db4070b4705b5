package benchmode_test

import (
	"fmt"

	"github.com/berth-go/berth/internal/benchmode"
)

// Only benchmarks flip the switch, and they put it back.
func Example() {
	benchmode.IgnoreBatchPending.Store(true)
	defer benchmode.IgnoreBatchPending.Store(false)
	fmt.Println(benchmode.IgnoreBatchPending.Load())
	// Output: true
}
