package sqlbench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/berth-go/berth/internal/bench"
)

// Scenario names.
const (
	ScenarioSteady = "sql/steady"
	ScenarioDrain  = "sql/drain"
)

// Full sizes of the scenarios (bench.Env.Scale = 1), from issue 3.
const (
	SteadyInstances   = 12
	SteadyConcurrency = 256
	SteadyHandler     = 50 * time.Millisecond
	SteadyRate        = 400.0 // messages per second
	SteadyDuration    = 60 * time.Second
	// SteadyPublishBatch is the number of messages per Publish call: one,
	// as an application publishing per request does.
	SteadyPublishBatch = 1
	// SteadyGrace bounds the wait for the last messages once publishing
	// stops (a strategy that cannot keep up stops there).
	SteadyGrace = 10 * time.Second

	DrainBacklog     = 20000
	DrainConcurrency = SteadyConcurrency
	DrainHandler     = time.Millisecond
	// DrainTimeout bounds one drain run at full size.
	DrainTimeout = 5 * time.Minute
)

// DrainInstances are the instance counts of the drain scenario.
var DrainInstances = []int{1, 4, 12}

func init() {
	bench.Register(bench.Scenario{
		Name: ScenarioSteady,
		Description: fmt.Sprintf("%d competing instances × concurrency %d, %s handler, steady %.0f msg/s for %s on PostgreSQL: "+
			"Berth vs a peek-then-fan-out baseline vs watermill-sql", SteadyInstances, SteadyConcurrency, SteadyHandler, SteadyRate, SteadyDuration),
		Needs: []string{"postgres"},
		Run:   RunSteady,
	})
	bench.Register(bench.Scenario{
		Name: ScenarioDrain,
		Description: fmt.Sprintf("a %d-message backlog drained by %v instances, %s handler, on PostgreSQL: "+
			"Berth vs a peek-then-fan-out baseline vs watermill-sql", DrainBacklog, DrainInstances, DrainHandler),
		Needs: []string{"postgres"},
		Run:   RunDrain,
	})
}

// scaled returns v × scale, at least lo.
func scaled(v, scale, lo float64) float64 {
	if scale <= 0 {
		scale = 1
	}
	return math.Max(v*scale, lo)
}

func progressOf(env bench.Env) func(float64, string) {
	if env.Progress == nil {
		return func(float64, string) {}
	}
	return env.Progress
}

// SteadyConfigs returns the runs of the steady scenario at scale: every
// strategy, back to back, under the same load. Scale shortens the duration;
// the rate, instance count and concurrency stay.
func SteadyConfigs(scale float64) []RunConfig {
	dur := time.Duration(scaled(float64(SteadyDuration), scale, float64(2*time.Second)))
	grace := time.Duration(scaled(float64(SteadyGrace), scale, float64(3*time.Second)))
	var out []RunConfig
	for _, s := range Strategies {
		out = append(out, RunConfig{
			Scenario:     ScenarioSteady,
			Strategy:     s,
			Instances:    SteadyInstances,
			Concurrency:  SteadyConcurrency,
			Handler:      SteadyHandler,
			Rate:         SteadyRate,
			Duration:     dur,
			PublishBatch: SteadyPublishBatch,
			Grace:        grace,
		})
	}
	return out
}

// DrainConfigs returns the runs of the drain scenario at scale: for each
// instance count, every strategy back to back. Scale shrinks the backlog.
func DrainConfigs(scale float64) []RunConfig {
	backlog := int(scaled(DrainBacklog, scale, 200))
	timeout := time.Duration(scaled(float64(DrainTimeout), scale, float64(30*time.Second)))
	var out []RunConfig
	for _, n := range DrainInstances {
		for _, s := range Strategies {
			out = append(out, RunConfig{
				Scenario:    ScenarioDrain,
				Strategy:    s,
				Instances:   n,
				Concurrency: DrainConcurrency,
				Handler:     DrainHandler,
				Backlog:     backlog,
				Timeout:     timeout,
			})
		}
	}
	return out
}

// RunSteady is the sql/steady scenario.
func RunSteady(ctx context.Context, env bench.Env) ([]bench.Result, error) {
	return runAll(ctx, env, SteadyConfigs(env.Scale))
}

// RunDrain is the sql/drain scenario.
func RunDrain(ctx context.Context, env bench.Env) ([]bench.Result, error) {
	return runAll(ctx, env, DrainConfigs(env.Scale))
}

// runAll runs rcs in order on env's server, reporting overall progress.
func runAll(ctx context.Context, env bench.Env, rcs []RunConfig) ([]bench.Result, error) {
	if env.PostgresURL == "" {
		return nil, errors.New("sqlbench: needs PostgreSQL (bench.Env.PostgresURL)")
	}
	db, err := openPostgres(ctx, env.PostgresURL)
	if err != nil {
		return nil, err
	}
	h := newHarness(db)
	defer h.Close()
	progress := progressOf(env)
	var out []bench.Result
	for i, rc := range rcs {
		status := fmt.Sprintf("%s %s ×%d", rc.Scenario, rc.Strategy, rc.Instances)
		progress(float64(i)/float64(len(rcs)), status)
		rc.Progress = func(f float64) {
			progress((float64(i)+min(max(f, 0), 1))/float64(len(rcs)), status)
		}
		r, err := h.Run(ctx, rc)
		if err != nil {
			return out, fmt.Errorf("%s: %w", status, err)
		}
		out = append(out, r)
	}
	progress(1, "done")
	return out, nil
}
