// Command sqlitedrain runs the SQLite drain (docs/benchmarks.md, "SQLite
// drain against goqite and River"): the same work as the PostgreSQL drain,
// on a SQLite file, for Berth and two SQLite-backed contenders.
//
// Each run creates a fresh database file in a temporary directory (WAL
// journal, synchronous NORMAL, busy timeout, one connection — the settings
// Berth's sqlite.Open uses and goqite and River's SQLite driver recommend),
// publishes a backlog of -messages messages of -size bytes, then starts one
// consumer instance with -workers concurrent workers whose handler sleeps
// -handler. It measures msg/s from the start of consumption until every
// message has been handled and its completion is on disk (the queue table
// empty, or, for River, every job row completed), and checks that every
// message was handled: it counts distinct message indexes (carried in the
// payload), reports duplicates and left-over rows, and fails a run that
// loses a message.
//
// Contenders, interleaved in -rounds rounds in this order:
//
//   - berth: Berth's SQLite transport (transport/sqlite), published with
//     Berth's publisher and consumed through the Watermill subscriber channel
//     (receiver.Config{Concurrency: workers}), each message acked after the
//     handler.
//   - goqite, goqite-tuned: maragu.dev/goqite's job runner (jobs.Runner,
//     Limit: workers) at its default poll interval (100 ms), and at 1 ms.
//     With -only, goqite-api also runs goqite's Receive/Delete API from
//     workers goroutines polling every 1 ms (slower than the runner here).
//   - river, river-tuned: River with riversqlite over database/sql (the
//     modernc.org/sqlite driver Berth uses), MaxWorkers: workers, at River's
//     defaults, and with FetchCooldown 1 ms and FetchPollInterval 10 ms.
//
// It prints one line per run (with the load average from /proc/loadavg at
// the run's end), then the median msg/s of each contender and the ratio of
// Berth's median to the best other median.
//
// It is a module of its own so that goqite and River stay out of Berth's
// go.mod:
//
//	cd internal/bench/sqlitedrain && go run . -rounds 3
package main

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, as Berth's transport uses
)

// config is one run's scenario.
type config struct {
	Messages int           // backlog size
	Size     int           // payload bytes
	Workers  int           // concurrent handlers of the one consumer
	Handler  time.Duration // handler sleep
	Timeout  time.Duration // bound on the drain
	Dir      string        // where the database file goes
}

// result is what one run measured.
type result struct {
	Contender  string
	Messages   int
	Elapsed    time.Duration
	MsgPerSec  float64
	Duplicates int // handler calls beyond the first per message
	Missing    int // messages never handled
	Left       int // rows not completed/deleted at the end
	Load       string
}

func (r result) String() string {
	return fmt.Sprintf("%-13s msgs=%d elapsed=%-8s msg/s=%8.0f dup=%d missing=%d left=%d load=%s",
		r.Contender, r.Messages, r.Elapsed.Round(time.Millisecond), r.MsgPerSec, r.Duplicates, r.Missing, r.Left, r.Load)
}

// contender drains cfg.Messages messages. publish fills the backlog (not
// timed); consume starts consumption and returns when the tracker has seen
// every message and left reports no rows, or fails.
type contender struct {
	name string
	run  func(ctx context.Context, cfg config, path string, t *tracker) (left int, elapsed time.Duration, err error)
}

var contenders = []contender{
	{"berth", runBerth},
	{"goqite", func(ctx context.Context, cfg config, path string, t *tracker) (int, time.Duration, error) {
		return runGoqite(ctx, cfg, path, t, 0)
	}},
	{"goqite-tuned", func(ctx context.Context, cfg config, path string, t *tracker) (int, time.Duration, error) {
		return runGoqite(ctx, cfg, path, t, time.Millisecond)
	}},
	// Not in the default rotation (-only goqite-api): goqite's
	// Receive/Delete API with workers goroutines polling every 1 ms.
	{"goqite-api", func(ctx context.Context, cfg config, path string, t *tracker) (int, time.Duration, error) {
		return runGoqiteAPI(ctx, cfg, path, t, time.Millisecond)
	}},
	{"river", func(ctx context.Context, cfg config, path string, t *tracker) (int, time.Duration, error) {
		return runRiver(ctx, cfg, path, t, false)
	}},
	{"river-tuned", func(ctx context.Context, cfg config, path string, t *tracker) (int, time.Duration, error) {
		return runRiver(ctx, cfg, path, t, true)
	}},
}

// dsn is the modernc.org/sqlite DSN every contender opens its file with:
// the pragmas of Berth's sqlite.Open.
func dsn(path string) string {
	return "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
}

// openOne opens path with one connection, as goqite and riversqlite
// recommend (and as Berth's shared pool holds).
func openOne(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.Ping(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// payload is message i's body: its index, then padding to size bytes.
func payload(i, size int) []byte {
	b := make([]byte, max(size, 8))
	binary.BigEndian.PutUint64(b, uint64(i))
	for j := 8; j < len(b); j++ {
		b[j] = 'x'
	}
	return b
}

// tracker counts handler calls per message index.
type tracker struct {
	seen    []atomic.Int32
	handled atomic.Int64 // distinct messages handled
	done    chan struct{}
}

func newTracker(n int) *tracker {
	return &tracker{seen: make([]atomic.Int32, n), done: make(chan struct{})}
}

// handle records message i; the call that completes the set closes done.
func (t *tracker) handle(i int) {
	if i < 0 || i >= len(t.seen) {
		return
	}
	if t.seen[i].Add(1) == 1 && t.handled.Add(1) == int64(len(t.seen)) {
		close(t.done)
	}
}

func (t *tracker) index(b []byte) int {
	if len(b) < 8 {
		return -1
	}
	return int(binary.BigEndian.Uint64(b))
}

func (t *tracker) counts() (dup, missing int) {
	for i := range t.seen {
		switch c := int(t.seen[i].Load()); {
		case c == 0:
			missing++
		case c > 1:
			dup += c - 1
		}
	}
	return dup, missing
}

// waitDrained waits until every message was handled, then polls count (on
// a connection of its own) until it reports no rows left; it returns the
// rows left and when that was seen.
func waitDrained(ctx context.Context, t *tracker, count func(context.Context) (int, error)) (int, time.Time, error) {
	select {
	case <-t.done:
	case <-ctx.Done():
		left, _ := count(context.WithoutCancel(ctx))
		return left, time.Now(), fmt.Errorf("drain: %d of %d handled: %w", t.handled.Load(), len(t.seen), ctx.Err())
	}
	for {
		left, err := count(ctx)
		if err != nil {
			return left, time.Now(), err
		}
		if left == 0 {
			return 0, time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return left, time.Now(), fmt.Errorf("drain: all handled but %d rows left: %w", left, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// countRows returns a counter of query's single integer on a read-only
// connection of its own (WAL readers do not block the writer).
func countRows(path, query string) (func(context.Context) (int, error), func(), error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	return func(ctx context.Context) (int, error) {
		var n int
		err := db.QueryRowContext(ctx, query).Scan(&n)
		return n, err
	}, func() { _ = db.Close() }, nil
}

// runOne runs one contender on a fresh database file.
func runOne(ctx context.Context, c contender, cfg config) (result, error) {
	res := result{Contender: c.name, Messages: cfg.Messages}
	dir, err := os.MkdirTemp(cfg.Dir, "sqlitedrain-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, c.name+".db")
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	t := newTracker(cfg.Messages)
	left, elapsed, err := c.run(ctx, cfg, path, t)
	res.Elapsed, res.Left = elapsed, left
	res.Duplicates, res.Missing = t.counts()
	if elapsed > 0 {
		res.MsgPerSec = float64(cfg.Messages) / elapsed.Seconds()
	}
	res.Load = loadavg()
	if err == nil && (res.Missing > 0 || res.Left > 0) {
		err = fmt.Errorf("%s lost messages: missing=%d left=%d", c.name, res.Missing, res.Left)
	}
	return res, err
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func main() {
	cfg := config{}
	var (
		rounds int
		only   string
	)
	flag.IntVar(&cfg.Messages, "messages", 20000, "backlog size")
	flag.IntVar(&cfg.Size, "size", 1024, "payload bytes")
	flag.IntVar(&cfg.Workers, "workers", 256, "concurrent handlers of the one consumer")
	flag.DurationVar(&cfg.Handler, "handler", time.Millisecond, "handler sleep")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "bound on one run")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for the database files; default the system temp dir")
	flag.IntVar(&rounds, "rounds", 3, "rounds; each runs every contender once")
	flag.StringVar(&only, "only", "", "comma-separated contenders to run (default berth,goqite,goqite-tuned,river,river-tuned; also goqite-api)")
	flag.Parse()
	if cfg.Messages < 1 || cfg.Workers < 1 || rounds < 1 || cfg.Handler < 0 {
		fmt.Fprintln(os.Stderr, "sqlitedrain: -messages, -workers and -rounds must be ≥ 1, -handler ≥ 0")
		os.Exit(2)
	}
	run := slices.DeleteFunc(slices.Clone(contenders), func(c contender) bool { return c.name == "goqite-api" })
	if only != "" {
		run = nil
		for _, c := range contenders {
			if slices.Contains(strings.Split(only, ","), c.name) {
				run = append(run, c)
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Printf("# sqlitedrain messages=%d size=%d workers=%d handler=%s rounds=%d\n",
		cfg.Messages, cfg.Size, cfg.Workers, cfg.Handler, rounds)
	rates := map[string][]float64{}
	var failed error
	for round := 1; round <= rounds; round++ {
		for _, c := range run {
			r, err := runOne(ctx, c, cfg)
			fmt.Printf("round=%d %s\n", round, r)
			if err != nil {
				fmt.Fprintf(os.Stderr, "sqlitedrain: round %d %s: %v\n", round, c.name, err)
				failed = errors.Join(failed, err)
				if ctx.Err() != nil {
					os.Exit(1)
				}
				continue
			}
			rates[c.name] = append(rates[c.name], r.MsgPerSec)
		}
	}
	fmt.Println("# medians (msg/s)")
	var berth, best float64
	bestName := ""
	for _, c := range run {
		m := median(rates[c.name])
		runs := make([]string, 0, len(rates[c.name]))
		for _, r := range rates[c.name] {
			runs = append(runs, fmt.Sprintf("%.0f", r))
		}
		fmt.Printf("%-13s median=%8.0f runs=[%s]\n", c.name, m, strings.Join(runs, " "))
		if c.name == "berth" {
			berth = m
		} else if m > best {
			best, bestName = m, c.name
		}
	}
	if berth > 0 && best > 0 {
		fmt.Printf("# berth / best other (%s) = %.2f\n", bestName, berth/best)
	}
	if failed != nil {
		os.Exit(1)
	}
}
