// Command river runs Berth's idle scenario (docs/benchmarks.md, "Idle")
// with River in place of Berth: Instances River clients, each with its own
// pgx pool (as a separate process would have) and River's defaults, each
// working the same Queues queues; nothing is inserted. After a warm-up it
// counts over a window the transactions of the database the run creates
// for itself (pg_stat_database xact_commit + xact_rollback, so that other
// clients of the server do not count) and the connections open to it, as
// sqlbench.RunIdle does for Berth.
//
// It is a module of its own so that River stays out of Berth's go.mod:
//
//	cd internal/bench/river && go run . -queues 50 -instances 3
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// config is one idle run.
type config struct {
	URL               string // any database of the server: the run creates its own
	Queues, Instances int
	MaxWorkers        int // per queue; River requires one, it does not change what an idle client does
	Warmup, Window    time.Duration
}

// result is what an idle run measured, named as sqlbench.IdleResult names it.
type result struct {
	Listeners   int
	Tx          int64
	TxPerSec    float64
	PerListener float64
	Connections int
}

func (r result) String() string {
	return fmt.Sprintf("listeners=%d tx=%d tx/s=%.3f per_listener=%.4f conns=%d",
		r.Listeners, r.Tx, r.TxPerSec, r.PerListener, r.Connections)
}

func main() {
	def := os.Getenv("BERTH_TEST_POSTGRES_URL")
	if def == "" {
		def = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	var cfg config
	flag.StringVar(&cfg.URL, "url", def, "PostgreSQL URL; default $BERTH_TEST_POSTGRES_URL")
	flag.IntVar(&cfg.Queues, "queues", 50, "queues every client works")
	flag.IntVar(&cfg.Instances, "instances", 3, "River clients, each with its own pool")
	flag.IntVar(&cfg.MaxWorkers, "max-workers", 1, "QueueConfig.MaxWorkers of every queue")
	flag.DurationVar(&cfg.Warmup, "warmup", 30*time.Second, "time before the window")
	flag.DurationVar(&cfg.Window, "window", time.Minute, "measured idle time")
	flag.Parse()
	if cfg.Queues < 1 || cfg.Instances < 1 || cfg.MaxWorkers < 1 || cfg.Window <= 0 || cfg.Warmup < 0 {
		fmt.Fprintln(os.Stderr, "river: -queues, -instances and -max-workers must be ≥ 1, -window > 0, -warmup ≥ 0")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(1)
	}
	fmt.Println(r)
}

// idleArgs is the one job kind the clients know; nothing inserts it.
type idleArgs struct{}

func (idleArgs) Kind() string { return "idle" }

type idleWorker struct {
	river.WorkerDefaults[idleArgs]
}

func (idleWorker) Work(context.Context, *river.Job[idleArgs]) error { return nil }

func run(ctx context.Context, cfg config) (res result, err error) {
	admin, err := pgx.Connect(ctx, cfg.URL)
	if err != nil {
		return res, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	name, dsn, err := scratchURL(cfg.URL)
	if err != nil {
		return res, err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return res, fmt.Errorf("create database: %w", err)
	}
	defer func() {
		_, derr := admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE "+name+" WITH (FORCE)")
		err = errors.Join(err, derr)
	}()

	// River's schema, from a pool of its own closed before the clients start.
	mpool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return res, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(mpool), nil)
	if err == nil {
		_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	mpool.Close()
	if err != nil {
		return res, fmt.Errorf("migrate: %w", err)
	}

	queues := make(map[string]river.QueueConfig, cfg.Queues)
	for i := range cfg.Queues {
		queues["idle"+strconv.Itoa(i)] = river.QueueConfig{MaxWorkers: cfg.MaxWorkers}
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, idleWorker{})
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	var (
		pools   []*pgxpool.Pool
		clients []*river.Client[pgx.Tx]
	)
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, c := range clients {
			err = errors.Join(err, c.Stop(sctx))
		}
		for _, p := range pools {
			p.Close()
		}
	}()
	for range cfg.Instances {
		pool, err := pgxpool.New(ctx, dsn) // pgxpool's default size: max(4, CPUs)
		if err != nil {
			return res, err
		}
		pools = append(pools, pool)
		c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Queues: queues, Workers: workers, Logger: logger})
		if err != nil {
			return res, err
		}
		if err := c.Start(ctx); err != nil {
			return res, err
		}
		clients = append(clients, c)
	}
	res.Listeners = cfg.Queues * cfg.Instances

	count := func() (tx int64, conns int, err error) {
		err = admin.QueryRow(ctx, `SELECT xact_commit + xact_rollback, (SELECT count(*) FROM pg_stat_activity WHERE datname = $1)
FROM pg_stat_database WHERE datname = $1`, name).Scan(&tx, &conns)
		return tx, conns, err
	}
	if err := sleep(ctx, cfg.Warmup); err != nil {
		return res, err
	}
	tx0, _, err := count()
	if err != nil {
		return res, err
	}
	if err := sleep(ctx, cfg.Window); err != nil {
		return res, err
	}
	tx1, conns, err := count()
	if err != nil {
		return res, err
	}
	res.Tx, res.Connections = tx1-tx0, conns
	res.TxPerSec = float64(res.Tx) / cfg.Window.Seconds()
	res.PerListener = res.TxPerSec / float64(res.Listeners)
	return res, nil
}

// scratchURL returns a new database name and rawURL pointing at it.
func scratchURL(rawURL string) (name, dsn string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name = "river_idle_" + hex.EncodeToString(b[:])
	u.Path = "/" + name
	return name, u.String(), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
