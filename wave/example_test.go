package wave_test

import (
	"fmt"

	"github.com/berth-go/berth/wave"
)

// A backlog of 20 messages: the loop probes with one receive, doubles while
// every probe finds a message, then takes what it observed.
func Example() {
	c, _ := wave.New(wave.Config{}, nil)
	backlog := 20
	for backlog > 0 {
		n := c.Next(100)
		found := min(n, backlog)
		backlog -= found
		c.Observe(n, found)
		fmt.Printf("wave %d found %d\n", n, found)
	}
	fmt.Println("next:", c.Next(100))
	// Output:
	// wave 1 found 1
	// wave 2 found 2
	// wave 4 found 4
	// wave 8 found 8
	// wave 16 found 5
	// next: 5
}
