// Package bench holds what Berth's benchmark scenarios share: the result
// record that `berth bench` writes as JSON and draws as SVG charts, and a
// registry the scenario packages add themselves to.
package bench

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Result is one scenario run for one strategy (Berth, a baseline, another
// library) at one setting (instance count, backlog size).
type Result struct {
	Scenario string `json:"scenario"` // e.g. "sql/drain"
	Strategy string `json:"strategy"` // e.g. "berth", "peek-baseline", "watermill-sql"
	// Database is the database a SQL scenario ran on when it is not
	// PostgreSQL, the sql/ scenarios' usual one: "sqlserver". Results on
	// different databases are charted apart.
	Database  string             `json:"database,omitempty"`
	Instances int                `json:"instances"` // competing subscriber instances
	Messages  int                `json:"messages"`  // messages processed
	Duration  time.Duration      `json:"duration_ns"`
	Metrics   map[string]float64 `json:"metrics"` // e.g. "msg_per_s", "round_trips_per_msg", "p99_ms"
	// Series holds time series (e.g. "heap_bytes", "rss_bytes") sampled
	// during the run, for charts.
	Series map[string][]Point `json:"series,omitempty"`
	Notes  string             `json:"notes,omitempty"`
}

// Point is one sample of a series.
type Point struct {
	At    time.Duration `json:"at_ns"` // since the run started
	Value float64       `json:"value"`
}

// Env is what a scenario gets from `berth bench`.
type Env struct {
	PostgresURL  string // "" when unavailable
	SQSEndpoint  string // "" when unavailable
	SQLServerURL string // sqlserver://…; "" when unavailable
	// Scale multiplies sizes and durations (1 = the documented full size;
	// tests run a fraction).
	Scale float64
	// Progress reports completion in [0, 1] with a short status.
	Progress func(fraction float64, status string)
	// Note, when set, receives remarks for whoever reads the output: what
	// was left out of a run and why, what could not be measured. `berth
	// bench` prints each once, after the scenario's progress bar.
	Note func(remark string)
}

// Scenario is one benchmark scenario.
type Scenario struct {
	Name        string // "sql/steady"
	Description string
	// Needs lists the services the scenario requires, every one of them:
	// "postgres", "sqs", "sqlserver".
	Needs []string
	// NeedsOneOf lists services of which the scenario requires at least
	// one, running on each that is configured (the sql/ scenarios:
	// "postgres", "sqlserver").
	NeedsOneOf []string
	Run        func(ctx context.Context, env Env) ([]Result, error)
}

var (
	mu        sync.Mutex
	scenarios = map[string]Scenario{}
)

// Register adds a scenario; scenario packages call it from init.
func Register(s Scenario) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := scenarios[s.Name]; dup {
		panic("bench: scenario registered twice: " + s.Name)
	}
	scenarios[s.Name] = s
}

// Scenarios returns the registered scenarios by name.
func Scenarios() []Scenario {
	mu.Lock()
	defer mu.Unlock()
	out := make([]Scenario, 0, len(scenarios))
	for _, s := range scenarios {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
