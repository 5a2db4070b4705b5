package sqlbench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// ScenarioOrdered is the ordering-key drain of issue 21: the same backlog
// drained without keys, with 1,000 keys and with 10 hot keys, side by
// side, on PostgreSQL (when configured) and SQLite.
const ScenarioOrdered = "sql/ordered"

// Full sizes of the ordered scenario (bench.Env.Scale = 1).
const (
	OrderedBacklog     = 20000
	OrderedInstances   = 4
	OrderedConcurrency = 64
	OrderedHandler     = time.Millisecond
	// OrderedRounds is how many times each mode runs, interleaved; results
	// are the medians.
	OrderedRounds = 3
	// OrderedTimeout bounds one drain.
	OrderedTimeout = 10 * time.Minute
)

// OrderedModes are the ordered scenario's workloads.
var OrderedModes = []OrderedMode{{}, {Keys: 1000}, {Keys: 10}, {Keys: 10, NackEvery: OrderedNackEvery}}

// An OrderedMode is a workload: Keys ordering keys (0: none); NackEvery > 0
// nacks every NackEvery-th message on its first attempt, with
// ordered_nack=dead_letter, so that the key's next message must follow the
// dead letter.
type OrderedMode struct {
	Keys, NackEvery int
}

// OrderedNackEvery is how often the dead-letter mode nacks.
const OrderedNackEvery = 50

func init() {
	bench.Register(bench.Scenario{
		Name: ScenarioOrdered,
		Description: fmt.Sprintf("a %d-message backlog drained by %d instances × concurrency %d, %s handler, without ordering keys, with 1,000 keys and with 10 keys, "+
			"medians of %d interleaved rounds, on PostgreSQL and SQLite", OrderedBacklog, OrderedInstances, OrderedConcurrency, OrderedHandler, OrderedRounds),
		Needs: []string{ServicePostgres},
		Run:   RunOrdered,
	})
}

// OrderedConfig is one ordered drain.
type OrderedConfig struct {
	Database    string // ServicePostgres or "sqlite"
	URL         string // PostgreSQL URL
	Dir         string // SQLite: the directory of its database files
	Keys        int    // 0: no ordering key
	NackEvery   int    // > 0: every NackEvery-th message is nacked once, ordered_nack=dead_letter
	Backlog     int
	Instances   int
	Concurrency int
	Handler     time.Duration
}

// OrderedResult is one drain's measurements.
type OrderedResult struct {
	Config   OrderedConfig
	Duration time.Duration // first subscribe to last ack
	Handled  int           // handler runs (duplicates included)
	Stats    sqlqueue.Stats
	// Gaps are, per key, the time from a message's ack (or nack) to the
	// start of the key's next message's handler: the wait of a key's next
	// message after its predecessor settled, plus the settlement itself.
	// DeadLetterGaps are those after a nack (dead-lettered).
	Gaps, DeadLetterGaps []time.Duration
}

// GapQuantile returns the q-quantile (0..1) of gaps, 0 when there are none.
func GapQuantile(gaps []time.Duration, q float64) time.Duration {
	if len(gaps) == 0 {
		return 0
	}
	s := slices.Clone(gaps)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// MsgPerSec is the drain throughput.
func (r OrderedResult) MsgPerSec() float64 { return float64(r.Config.Backlog) / r.Duration.Seconds() }

// StatementsPerMsg is the subscribers' statements (round trips) per message.
func (r OrderedResult) StatementsPerMsg() float64 {
	return float64(r.Stats.RoundTrips()) / float64(r.Config.Backlog)
}

// RunOrderedDrain publishes c.Backlog messages (message i with key i mod
// c.Keys, keys interleaved as many publishers would write them), then
// drains them with c.Instances subscribers, each with its own pool on
// PostgreSQL.
func RunOrderedDrain(ctx context.Context, c OrderedConfig) (OrderedResult, error) {
	res := OrderedResult{Config: c}
	var (
		tables  sqlqueue.Tables
		dialect sqlqueue.Dialect
		open    func(conns int) (*sql.DB, error)
		cleanup []func()
	)
	defer func() {
		for _, f := range slices.Backward(cleanup) {
			f()
		}
	}()
	switch c.Database {
	case ServicePostgres:
		schema := uniqueSchema("berth_ordered")
		admin, err := postgres.Open(c.URL, 2)
		if err != nil {
			return res, err
		}
		if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
			_ = admin.Close()
			return res, err
		}
		cleanup = append(cleanup, func() {
			_, _ = admin.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
			_ = admin.Close()
		})
		tables, dialect = sqlqueue.Tables{Schema: schema}, postgres.Dialect{}
		open = func(conns int) (*sql.DB, error) { return postgres.Open(c.URL, conns) }
	case "sqlite":
		path := filepath.Join(c.Dir, "ordered-"+watermill.NewShortUUID()+".db")
		db, closer, err := sqlite.Open(path)
		if err != nil {
			return res, err
		}
		cleanup = append(cleanup, func() { _ = closer.Close(); _ = os.Remove(path) })
		dialect = sqlite.Dialect{}
		open = func(int) (*sql.DB, error) { return db, nil }
	default:
		return res, fmt.Errorf("sqlbench: ordered: unknown database %q", c.Database)
	}
	pubDB, err := open(8)
	if err != nil {
		return res, err
	}
	if c.Database == ServicePostgres {
		cleanup = append(cleanup, func() { _ = pubDB.Close() })
	}
	const topic = "ordered"
	subCfg := func(db *sql.DB) sqlqueue.SubscriberConfig {
		sc := sqlqueue.SubscriberConfig{DB: db, Tables: tables}
		sc.Pipeline.Concurrency = c.Concurrency
		sc.Pipeline.MaxAttempts = -1
		if c.NackEvery > 0 {
			sc.Pipeline.OrderedNack = receiver.OrderedNackDeadLetter
		}
		return sc
	}
	// The queue exists (and is subscribed) before the backlog goes in.
	first, err := sqlqueue.NewSubscriber(dialect, subCfg(pubDB), nil)
	if err != nil {
		return res, err
	}
	if err := first.SubscribeInitialize(topic); err != nil {
		return res, err
	}
	_ = first.Close()
	pub, err := sqlqueue.NewPublisher(dialect, sqlqueue.PublisherConfig{DB: pubDB, Tables: tables}, nil)
	if err != nil {
		return res, err
	}
	for start := 0; start < c.Backlog; start += 500 {
		batch := make([]*message.Message, 0, 500)
		for i := start; i < min(start+500, c.Backlog); i++ {
			m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
			if c.Keys > 0 {
				m.Metadata.Set(transport.MetadataOrderingKey, fmt.Sprintf("key-%d", i%c.Keys))
			}
			batch = append(batch, m)
		}
		if err := pub.Publish(topic, batch...); err != nil {
			return res, err
		}
	}
	_ = pub.Close()

	ctx, cancel := context.WithTimeout(ctx, OrderedTimeout)
	defer cancel()
	var (
		handled   atomic.Int64
		seen      sync.Map
		remaining atomic.Int64
		done      = make(chan struct{})
		wg        sync.WaitGroup
		subs      []*sqlqueue.Subscriber
		gapMu     sync.Mutex
		lastEnd   = map[string]time.Time{} // per key: when its last message was acked
		lastNack  = map[string]bool{}      // … and whether that was a nack
	)
	remaining.Store(int64(c.Backlog))
	began := time.Now()
	for range c.Instances {
		db, err := open(c.Concurrency/4 + 4)
		if err != nil {
			return res, err
		}
		if c.Database == ServicePostgres {
			cleanup = append(cleanup, func() { _ = db.Close() })
		}
		sub, err := sqlqueue.NewSubscriber(dialect, subCfg(db), nil)
		if err != nil {
			return res, err
		}
		subs = append(subs, sub)
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			return res, err
		}
		for range c.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for m := range ch {
					key := m.Metadata.Get(transport.MetadataOrderingKey)
					if key != "" {
						now := time.Now()
						gapMu.Lock()
						if end, ok := lastEnd[key]; ok {
							if lastNack[key] {
								res.DeadLetterGaps = append(res.DeadLetterGaps, now.Sub(end))
							} else {
								res.Gaps = append(res.Gaps, now.Sub(end))
							}
						}
						gapMu.Unlock()
					}
					if c.Handler > 0 {
						time.Sleep(c.Handler) // the handler's work
					}
					handled.Add(1)
					i, _ := strconv.Atoi(string(m.Payload))
					nack := c.NackEvery > 0 && i%c.NackEvery == c.NackEvery-1
					if _, dup := seen.LoadOrStore(m.UUID, true); !dup && remaining.Add(-1) == 0 {
						close(done)
					}
					if key != "" {
						gapMu.Lock()
						lastEnd[key], lastNack[key] = time.Now(), nack
						gapMu.Unlock()
					}
					if nack {
						m.Nack()
					} else {
						m.Ack()
					}
				}
			}()
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		for _, s := range subs {
			_ = s.Close()
		}
		wg.Wait()
		return res, fmt.Errorf("sqlbench: ordered drain of %d with %d keys: %d left after %s", c.Backlog, c.Keys, remaining.Load(), OrderedTimeout)
	}
	res.Duration = time.Since(began)
	for _, s := range subs {
		_ = s.Close()
	}
	wg.Wait()
	res.Handled = int(handled.Load())
	for _, s := range subs {
		addStats(&res.Stats, s.Stats())
	}
	return res, nil
}

// OrderedConfigs returns the ordered scenario's drains on database at
// scale, one per mode (OrderedModes).
func OrderedConfigs(database, url, dir string, scale float64) []OrderedConfig {
	var out []OrderedConfig
	for _, m := range OrderedModes {
		out = append(out, OrderedConfig{
			Database: database, URL: url, Dir: dir, Keys: m.Keys, NackEvery: m.NackEvery,
			Backlog:   int(scaled(OrderedBacklog, scale, 2000)),
			Instances: OrderedInstances, Concurrency: OrderedConcurrency, Handler: OrderedHandler,
		})
	}
	return out
}

// RunOrdered is the sql/ordered scenario: on PostgreSQL (when env has it)
// and SQLite, each mode OrderedRounds times, interleaved, reporting the
// medians.
func RunOrdered(ctx context.Context, env bench.Env) ([]bench.Result, error) {
	dir, err := os.MkdirTemp("", "berth-ordered-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var dbs []string
	if env.PostgresURL != "" {
		dbs = append(dbs, ServicePostgres)
	}
	dbs = append(dbs, "sqlite")
	progress := progressOf(env)
	var out []bench.Result
	total, done := len(dbs)*len(OrderedModes)*OrderedRounds, 0
	for _, db := range dbs {
		cs := OrderedConfigs(db, env.PostgresURL, dir, env.Scale)
		runs := make([][]OrderedResult, len(cs))
		load := []string{loadAvg()}
		for range OrderedRounds {
			for i, c := range cs {
				progress(float64(done)/float64(total), fmt.Sprintf("%s %s keys=%d nack=%d", ScenarioOrdered, db, c.Keys, c.NackEvery))
				r, err := RunOrderedDrain(ctx, c)
				if err != nil {
					return out, err
				}
				runs[i] = append(runs[i], r)
				done++
			}
		}
		load = append(load, loadAvg())
		for i, c := range cs {
			out = append(out, orderedResult(db, c, runs[i], load))
		}
	}
	progress(1, "done")
	return out, nil
}

// orderedResult is the median of rs as a bench.Result.
func orderedResult(db string, c OrderedConfig, rs []OrderedResult, load []string) bench.Result {
	med := func(f func(OrderedResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	strategy := "unordered"
	if c.Keys > 0 {
		strategy = fmt.Sprintf("ordered, %d keys", c.Keys)
	}
	if c.NackEvery > 0 {
		strategy += fmt.Sprintf(", 1 in %d dead-lettered", c.NackEvery)
	}
	var each []string
	for _, r := range rs {
		each = append(each, fmt.Sprintf("%.0f", r.MsgPerSec()))
	}
	r := bench.Result{
		Scenario: ScenarioOrdered, Strategy: strategy, Instances: c.Instances, Messages: c.Backlog,
		Duration: time.Duration(med(func(r OrderedResult) float64 { return float64(r.Duration) })),
		Metrics: map[string]float64{
			"msg_per_s":          med(OrderedResult.MsgPerSec),
			"statements_per_msg": med(OrderedResult.StatementsPerMsg),
			"claims_per_msg":     med(func(r OrderedResult) float64 { return float64(r.Stats.Claims) / float64(c.Backlog) }),
			"rows_per_claim": med(func(r OrderedResult) float64 {
				return float64(r.Stats.ClaimedRows) / float64(max(r.Stats.Claims-r.Stats.EmptyClaims, 1))
			}),
			"gap_p50_ms":    med(func(r OrderedResult) float64 { return ms(GapQuantile(r.Gaps, 0.5)) }),
			"gap_p99_ms":    med(func(r OrderedResult) float64 { return ms(GapQuantile(r.Gaps, 0.99)) }),
			"dl_gap_p50_ms": med(func(r OrderedResult) float64 { return ms(GapQuantile(r.DeadLetterGaps, 0.5)) }),
			"dl_gap_max_ms": med(func(r OrderedResult) float64 { return ms(GapQuantile(r.DeadLetterGaps, 1)) }),
		},
		Notes: fmt.Sprintf("msg/s per round %s; load average %s", strings.Join(each, ", "), strings.Join(load, " → ")),
	}
	if db != ServicePostgres {
		r.Database = db
	}
	return r
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loadAvg is the 1-minute load average, "?" where /proc has none.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
