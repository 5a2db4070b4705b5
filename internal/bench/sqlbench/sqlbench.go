package sqlbench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/berth-go/berth/internal/bench"
)

// Scenario names.
const (
	ScenarioSteady = "sql/steady"
	ScenarioDrain  = "sql/drain"
	ScenarioIdle   = "sql/idle"
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

// Services the scenarios run on (bench.Scenario.NeedsOneOf), each that is
// configured: PostgreSQL (bench.Env.PostgresURL) with every strategy, SQL
// Server (bench.Env.SQLServerURL) with SQLServerStrategies.
const (
	ServicePostgres  = "postgres"
	ServiceSQLServer = "sqlserver"
)

func init() {
	bench.Register(bench.Scenario{
		Name: ScenarioSteady,
		Description: fmt.Sprintf("%d competing instances × concurrency %d, %s handler, steady %.0f msg/s for %s on PostgreSQL: "+
			"Berth vs a peek-then-fan-out baseline vs watermill-sql; on SQL Server: Berth alone",
			SteadyInstances, SteadyConcurrency, SteadyHandler, SteadyRate, SteadyDuration),
		NeedsOneOf: []string{ServicePostgres, ServiceSQLServer},
		Run:        RunSteady,
	})
	bench.Register(bench.Scenario{
		Name: ScenarioDrain,
		Description: fmt.Sprintf("a %d-message backlog drained by %v instances, %s handler, on PostgreSQL: "+
			"Berth vs a peek-then-fan-out baseline vs watermill-sql; on SQL Server: Berth alone", DrainBacklog, DrainInstances, DrainHandler),
		NeedsOneOf: []string{ServicePostgres, ServiceSQLServer},
		Run:        RunDrain,
	})
	bench.Register(bench.Scenario{
		Name: ScenarioIdle,
		Description: fmt.Sprintf("%d queues × %v instances listening on PostgreSQL, nothing published for %s after a %s warm-up: "+
			"the database's transactions per second (pg_stat_database), per listener, connections, then the first-message latency after idle; Berth alone",
			IdleQueues, IdleInstances, IdleWindow, IdleWarmup),
		Needs: []string{ServicePostgres},
		Run:   RunIdleScenario,
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
		for _, s := range DrainStrategies {
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

// RunSteady is the sql/steady scenario, on each database env configures.
func RunSteady(ctx context.Context, env bench.Env) ([]bench.Result, error) {
	return runAll(ctx, env, SteadyConfigs(env.Scale))
}

// RunDrain is the sql/drain scenario, on each database env configures.
func RunDrain(ctx context.Context, env bench.Env) ([]bench.Result, error) {
	rs, err := runAll(ctx, env, DrainConfigs(env.Scale))
	return withLimitRatio(rs), err
}

// target is one database a scenario runs on.
type target struct {
	name       string // a Service… constant
	url        string
	strategies []string
	open       func(ctx context.Context, url string) (database, error)
}

// targets returns the databases env configures, PostgreSQL first.
func targets(env bench.Env) []target {
	var ts []target
	if env.PostgresURL != "" {
		ts = append(ts, target{ServicePostgres, env.PostgresURL, Strategies, func(ctx context.Context, u string) (database, error) {
			return openPostgres(ctx, u)
		}})
	}
	if env.SQLServerURL != "" {
		ts = append(ts, target{ServiceSQLServer, env.SQLServerURL, SQLServerStrategies, func(ctx context.Context, u string) (database, error) {
			return openSQLServer(ctx, u)
		}})
	}
	return ts
}

// only returns the configs of rcs whose strategy is in strategies.
func only(rcs []RunConfig, strategies []string) []RunConfig {
	var out []RunConfig
	for _, rc := range rcs {
		if slices.Contains(strategies, rc.Strategy) {
			out = append(out, rc)
		}
	}
	return out
}

// runAll runs rcs in order on each database env configures (on SQL Server,
// Berth's runs alone), reporting overall progress. Every database is
// connected to first, so that a wrong URL fails before the first run.
func runAll(ctx context.Context, env bench.Env, rcs []RunConfig) ([]bench.Result, error) {
	ts := targets(env)
	if len(ts) == 0 {
		return nil, errors.New("sqlbench: needs PostgreSQL (bench.Env.PostgresURL) or SQL Server (bench.Env.SQLServerURL)")
	}
	hs := make([]*harness, 0, len(ts))
	defer func() {
		for _, h := range hs {
			_ = h.Close()
		}
	}()
	total := 0
	for _, t := range ts {
		db, err := t.open(ctx, t.url)
		if err != nil {
			return nil, err
		}
		hs = append(hs, newHarness(db))
		total += len(only(rcs, t.strategies))
		// PostgreSQL's remarks stay in its results' notes, as they always
		// have.
		if env.Note != nil && t.name != ServicePostgres {
			for _, n := range db.notes() {
				env.Note(n)
			}
		}
	}
	progress := progressOf(env)
	var out []bench.Result
	done := 0
	for i, t := range ts {
		suffix := ""
		if t.name != ServicePostgres {
			suffix = " on " + t.name
		}
		for _, rc := range only(rcs, t.strategies) {
			status := fmt.Sprintf("%s %s ×%d%s", rc.Scenario, rc.Strategy, rc.Instances, suffix)
			base, n := float64(done), float64(max(total, 1))
			progress(base/n, status)
			rc.Progress = func(f float64) {
				progress((base+min(max(f, 0), 1))/n, status)
			}
			r, err := hs[i].Run(ctx, rc)
			if err != nil {
				return out, fmt.Errorf("%s: %w", status, err)
			}
			out = append(out, r)
			done++
		}
	}
	progress(1, "done")
	return out, nil
}
