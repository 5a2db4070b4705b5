package sqlbench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// IdleConfig configures an idle run: Queues × Instances listeners, nothing
// published for Window, then one message per queue to measure the
// first-message latency after idle.
type IdleConfig struct {
	// URL of the PostgreSQL server (any database: the run creates its own,
	// so that other clients of the server do not count), or "sqlite" for a
	// database file in Dir.
	URL string
	// Dir holds the SQLite file. Required with URL "sqlite".
	Dir string
	// Queues and Instances: each instance (its own pool, as a separate
	// process would have) subscribes to every queue.
	Queues, Instances int
	// Conns is each instance's pool size. Defaults to 4.
	Conns int
	// IdleConns caps each instance's idle connections: 0 keeps the pool's
	// (Conns), negative keeps none (a fleet larger than the server's
	// max_connections then holds only the LISTEN connections).
	IdleConns int
	// Warmup precedes the window: subscriptions settle, elections run,
	// the probes back off. Defaults to 30s.
	Warmup time.Duration
	// Window is the measured idle time. Defaults to 60s.
	Window time.Duration
	// IdleProbeMax is passed to every subscriber: 0 is the default,
	// negative the behaviour before the shared probe (every source polls).
	IdleProbeMax time.Duration
	// SkipLatency skips the first-message latency measurement.
	SkipLatency bool
	// Settle is the pause between the two latency rounds, for the queues
	// to go idle again. Defaults to 2 × sqlqueue.DefaultIdleProbeMax.
	Settle time.Duration
}

// IdleResult is what an idle run measured.
type IdleResult struct {
	Listeners int
	// Tx is the database's transactions over the window (PostgreSQL:
	// pg_stat_database xact_commit + xact_rollback of the run's database;
	// SQLite: statements counted by the engine).
	Tx          int64
	TxPerSec    float64
	PerListener float64 // TxPerSec / Listeners
	// Connections open to the run's database at the end of the window
	// (PostgreSQL), all instances together.
	Connections int
	// First-message latency after idle, publish to receive: Notify from a
	// publisher in another process (its own pool: PostgreSQL NOTIFY; on
	// SQLite only the probe finds it), Local from a publisher sharing an
	// instance's pool (the in-process wake-up).
	NotifyP50, NotifyP99, LocalP50, LocalP99 time.Duration
	Stats                                    sqlqueue.Stats
}

func (r IdleResult) String() string {
	return fmt.Sprintf("listeners=%d tx=%d tx/s=%.3f per_listener=%.4f conns=%d notify_p50=%s notify_p99=%s local_p50=%s local_p99=%s claims=%d skipped=%d probes=%d sweeps=%d skipped_sweeps=%d",
		r.Listeners, r.Tx, r.TxPerSec, r.PerListener, r.Connections, r.NotifyP50, r.NotifyP99, r.LocalP50, r.LocalP99,
		r.Stats.Claims, r.Stats.SkippedClaims, r.Stats.Probes, r.Stats.Sweeps, r.Stats.SkippedSweeps)
}

// RunIdle runs one idle scenario.
func RunIdle(ctx context.Context, cfg IdleConfig) (res IdleResult, err error) {
	cfg.Conns = orDefault(cfg.Conns, 4)
	if cfg.Warmup == 0 {
		cfg.Warmup = 30 * time.Second
	}
	if cfg.Window == 0 {
		cfg.Window = time.Minute
	}
	if cfg.Settle == 0 {
		cfg.Settle = 2 * sqlqueue.DefaultIdleProbeMax
	}
	var (
		open    func(conns int) (*sql.DB, error)
		dialect sqlqueue.Dialect
		txCount func(context.Context) (int64, int, error) // transactions, connections
	)
	if cfg.URL == "sqlite" {
		if cfg.Dir == "" {
			return res, errors.New("sqlbench: idle on SQLite needs Dir")
		}
		path := cfg.Dir + "/idle.db"
		var closers []func() error
		defer func() {
			for _, c := range closers {
				_ = c()
			}
		}()
		// The first pool creates the file in WAL mode; every instance then
		// opens a pool of its own (sqlite.Open would share one per path),
		// as separate processes would.
		db, c, err := sqlite.Open(path)
		if err != nil {
			return res, err
		}
		closers = append(closers, c.Close)
		if err := db.PingContext(ctx); err != nil {
			return res, err
		}
		open = func(int) (*sql.DB, error) {
			return sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
		}
		dialect = sqlite.Dialect{}
	} else {
		name, dsn, drop, err := createDatabase(ctx, cfg.URL)
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, drop()) }()
		open = func(conns int) (*sql.DB, error) { return postgres.Open(dsn, conns) }
		dialect = postgres.Dialect{}
		admin, err := sql.Open("pgx", cfg.URL)
		if err != nil {
			return res, err
		}
		defer admin.Close()
		txCount = func(ctx context.Context) (int64, int, error) {
			var n int64
			var c int
			err := admin.QueryRowContext(ctx, `SELECT xact_commit + xact_rollback, (SELECT count(*) FROM pg_stat_activity WHERE datname = $1)
FROM pg_stat_database WHERE datname = $1`, name).Scan(&n, &c)
			return n, c, err
		}
	}

	topics := make([]string, cfg.Queues)
	for i := range topics {
		topics[i] = "idle" + strconv.Itoa(i)
	}
	type arrival struct {
		uuid string
		at   time.Time
	}
	arrivals := make(chan arrival, cfg.Queues*cfg.Instances)
	var (
		subs []*sqlqueue.Subscriber
		dbs  []*sql.DB
		wg   sync.WaitGroup
	)
	defer func() {
		for _, s := range subs {
			err = errors.Join(err, s.Close())
		}
		wg.Wait()
		for _, db := range dbs {
			_ = db.Close()
		}
	}()
	for range cfg.Instances {
		db, err := open(cfg.Conns)
		if err != nil {
			return res, err
		}
		dbs = append(dbs, db)
		if cfg.IdleConns != 0 {
			db.SetMaxIdleConns(max(cfg.IdleConns, 0))
		}
		sub, err := sqlqueue.NewSubscriber(dialect, sqlqueue.SubscriberConfig{DB: db, IdleProbeMax: cfg.IdleProbeMax}, nil)
		if err != nil {
			return res, err
		}
		subs = append(subs, sub)
		for _, topic := range topics {
			ch, err := sub.Subscribe(ctx, topic)
			if err != nil {
				return res, err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for m := range ch {
					arrivals <- arrival{m.UUID, time.Now()}
					m.Ack()
				}
			}()
		}
	}
	res.Listeners = cfg.Queues * cfg.Instances
	stats := func() sqlqueue.Stats {
		var t sqlqueue.Stats
		for _, s := range subs {
			addStats(&t, s.Stats())
		}
		return t
	}
	if err := sleepCtx(ctx, cfg.Warmup); err != nil {
		return res, err
	}
	s0 := stats()
	var tx0 int64
	if txCount != nil {
		if tx0, _, err = txCount(ctx); err != nil {
			return res, err
		}
	}
	if err := sleepCtx(ctx, cfg.Window); err != nil {
		return res, err
	}
	s1 := stats()
	res.Stats = diffStats(s1, s0)
	if txCount != nil {
		tx1, conns, err := txCount(ctx)
		if err != nil {
			return res, err
		}
		// The harness reads from another database: none of its own
		// transactions is in the count.
		res.Tx, res.Connections = tx1-tx0, conns
	} else {
		res.Tx = res.Stats.RoundTrips()
	}
	res.TxPerSec = float64(res.Tx) / cfg.Window.Seconds()
	res.PerListener = res.TxPerSec / float64(res.Listeners)
	if cfg.SkipLatency {
		return res, nil
	}

	latency := func(pubDB *sql.DB) ([]time.Duration, error) {
		pub, err := sqlqueue.NewPublisher(dialect, sqlqueue.PublisherConfig{DB: pubDB}, nil)
		if err != nil {
			return nil, err
		}
		defer pub.Close()
		var out []time.Duration
		for _, topic := range topics {
			m := message.NewMessage(topic+"-"+strconv.FormatInt(time.Now().UnixNano(), 36), nil)
			start := time.Now()
			if err := pub.Publish(topic, m); err != nil {
				return nil, err
			}
			select {
			case a := <-arrivals:
				if a.uuid != m.UUID {
					return nil, fmt.Errorf("sqlbench: got %s, want %s", a.uuid, m.UUID)
				}
				out = append(out, a.at.Sub(start))
			case <-time.After(time.Minute):
				return nil, fmt.Errorf("sqlbench: %s not received within a minute", m.UUID)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		slices.Sort(out)
		return out, nil
	}
	other, err := open(2)
	if err != nil {
		return res, err
	}
	defer other.Close()
	ns, err := latency(other)
	if err != nil {
		return res, err
	}
	// Let the queues go idle again before the in-process round.
	if err := sleepCtx(ctx, cfg.Settle); err != nil {
		return res, err
	}
	ls, err := latency(dbs[0])
	if err != nil {
		return res, err
	}
	res.NotifyP50, res.NotifyP99 = pct(ns, 0.5), pct(ns, 0.99)
	res.LocalP50, res.LocalP99 = pct(ls, 0.5), pct(ls, 0.99)
	return res, nil
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func diffStats(a, b sqlqueue.Stats) sqlqueue.Stats {
	return sqlqueue.Stats{
		Claims: a.Claims - b.Claims, EmptyClaims: a.EmptyClaims - b.EmptyClaims, SkippedClaims: a.SkippedClaims - b.SkippedClaims,
		Begins: a.Begins - b.Begins, Completes: a.Completes - b.Completes, Renews: a.Renews - b.Renews,
		Retries: a.Retries - b.Retries, Releases: a.Releases - b.Releases, DeadLetters: a.DeadLetters - b.DeadLetters,
		Inserts: a.Inserts - b.Inserts, Sweeps: a.Sweeps - b.Sweeps, Tx: a.Tx - b.Tx, Other: a.Other - b.Other,
		Probes: a.Probes - b.Probes, ProbeHits: a.ProbeHits - b.ProbeHits, SkippedSweeps: a.SkippedSweeps - b.SkippedSweeps,
	}
}

// createDatabase creates a database of its own on the server of rawURL
// and returns its name, a DSN for it and a func dropping it.
func createDatabase(ctx context.Context, rawURL string) (name, dsn string, drop func() error, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", nil, fmt.Errorf("sqlbench: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name = "berth_idle_" + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", rawURL)
	if err != nil {
		return "", "", nil, err
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close()
		return "", "", nil, fmt.Errorf("sqlbench: create database: %w", err)
	}
	u.Path = "/" + name
	return name, u.String(), func() error {
		defer admin.Close()
		_, err := admin.ExecContext(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
		return err
	}, nil
}
