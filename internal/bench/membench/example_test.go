package membench_test

import (
	"context"
	"fmt"
	"os"

	"github.com/berth-go/berth/internal/bench/membench"
)

// A small flood with accounting on: the listener never holds more than
// MaxQueue plus one wave, and every message is handled exactly once.
func ExampleRun() {
	dir, err := os.MkdirTemp("", "membench-example-*")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	cfg := membench.Config{
		Messages:    1000,
		ArrivalRate: 5000,
		SlowFactor:  10, // the batch handler takes 500 messages per second
		BatchSize:   50,
		MaxQueue:    100,
		Dir:         dir,
	}
	r, err := membench.Run(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("handled:", r.Messages)
	fmt.Println("lost:", r.Metrics["lost"], "duplicates:", r.Metrics["duplicates"])
	fmt.Println("held at most MaxQueue + one wave:", r.Metrics["peak_held_messages"] <= 100+64)
	// Output:
	// handled: 1000
	// lost: 0 duplicates: 0
	// held at most MaxQueue + one wave: true
}
