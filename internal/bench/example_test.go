package bench_test

import (
	"context"
	"fmt"

	"github.com/berth-go/berth/internal/bench"
)

// Scenario packages register themselves; `berth bench` runs what is
// registered and charts the results.
func Example() {
	bench.Register(bench.Scenario{
		Name: "example/noop",
		Run: func(ctx context.Context, env bench.Env) ([]bench.Result, error) {
			return []bench.Result{{Scenario: "example/noop", Strategy: "berth", Instances: 1,
				Metrics: map[string]float64{"msg_per_s": 1000 * env.Scale}}}, nil
		},
	})
	for _, s := range bench.Scenarios() {
		if s.Name != "example/noop" {
			continue
		}
		rs, _ := s.Run(context.Background(), bench.Env{Scale: 0.5})
		fmt.Println(rs[0].Strategy, rs[0].Metrics["msg_per_s"])
	}
	// Output: berth 500
}
