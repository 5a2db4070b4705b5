package chart_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/berth-go/berth/internal/bench/chart"
)

// A grouped bar chart of throughput by instance count, one bar per strategy.
func ExampleBars() {
	c := chart.Bars{
		Title:  "throughput",
		XLabel: "instances",
		YLabel: "messages/s",
		Groups: []string{"1", "4"},
		Series: []chart.Series{
			{Name: "berth", Values: []float64{4000, 12000}},
			{Name: "baseline", Values: []float64{3000, 6000}},
		},
	}
	var b strings.Builder
	if err := c.WriteSVG(&b); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println(strings.HasPrefix(b.String(), "<svg"), strings.Count(b.String(), "<title>"))
	// Output: true 4
}

func ExampleTicks() {
	fmt.Println(chart.Ticks(0, 12500, 5))
	// Output: [0 5000 10000 15000]
}
