package sqlbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// Full size of the idle scenario (bench.Env.Scale = 1), as BenchmarkIdle's
// defaults.
const (
	IdleQueues = 50
	IdleWarmup = 30 * time.Second
	IdleWindow = time.Minute
)

// IdleInstances are the instance counts of the idle scenario, each
// subscribing to all IdleQueues queues.
var IdleInstances = []int{1, 3}

// IdleConfigs returns the runs of the idle scenario on PostgreSQL at url and
// scale: IdleQueues queues × each of IdleInstances. Scale shortens the
// warm-up, the window and the pause between the latency rounds; the queue
// and instance counts stay.
func IdleConfigs(url string, scale float64) []IdleConfig {
	var out []IdleConfig
	for _, n := range IdleInstances {
		out = append(out, IdleConfig{
			URL:       url,
			Queues:    IdleQueues,
			Instances: n,
			Warmup:    time.Duration(scaled(float64(IdleWarmup), scale, float64(time.Second))),
			Window:    time.Duration(scaled(float64(IdleWindow), scale, float64(2*time.Second))),
			Settle:    time.Duration(scaled(float64(2*sqlqueue.DefaultIdleProbeMax), scale, float64(time.Second))),
		})
	}
	return out
}

// RunIdleScenario is the sql/idle scenario on PostgreSQL (env.PostgresURL):
// RunIdle for each of IdleConfigs, one result each (strategy "berth").
func RunIdleScenario(ctx context.Context, env bench.Env) ([]bench.Result, error) {
	if env.PostgresURL == "" {
		return nil, errors.New("sqlbench: sql/idle needs PostgreSQL (bench.Env.PostgresURL)")
	}
	cfgs := IdleConfigs(env.PostgresURL, env.Scale)
	progress := progressOf(env)
	var out []bench.Result
	for i, cfg := range cfgs {
		status := fmt.Sprintf("%s berth %d queues ×%d", ScenarioIdle, cfg.Queues, cfg.Instances)
		stop := progressByTime(func(f float64) { progress((float64(i)+f)/float64(len(cfgs)), status) }, cfg.Warmup+cfg.Window)
		r, err := RunIdle(ctx, cfg)
		stop()
		if err != nil {
			return out, fmt.Errorf("%s: %w", status, err)
		}
		out = append(out, idleResult(cfg, r))
	}
	progress(1, "done")
	return out, nil
}

// idleResult turns an idle run into a bench.Result.
func idleResult(cfg IdleConfig, r IdleResult) bench.Result {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return bench.Result{
		Scenario:  ScenarioIdle,
		Strategy:  StrategyBerth,
		Instances: cfg.Instances,
		Messages:  cfg.Queues * 2, // the two latency rounds
		Duration:  cfg.Window,
		Metrics: map[string]float64{
			"queues":                float64(cfg.Queues),
			"listeners":             float64(r.Listeners),
			"tx_per_s":              r.TxPerSec,
			"tx_per_s_per_listener": r.PerListener,
			"connections":           float64(r.Connections),
			"notify_p50_ms":         ms(r.NotifyP50),
			"notify_p99_ms":         ms(r.NotifyP99),
			"local_p50_ms":          ms(r.LocalP50),
			"local_p99_ms":          ms(r.LocalP99),
		},
		Notes: fmt.Sprintf("warmup=%s window=%s; %s", cfg.Warmup, cfg.Window, r),
	}
}

// progressByTime reports the fraction of d elapsed to f twice a second,
// capped below 1, until the returned func is called (which waits for it).
func progressByTime(f func(float64), d time.Duration) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() {
		defer wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				f(min(0.95, float64(time.Since(start))/float64(max(d, 1))))
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		wg.Wait()
	}
}
