// Command exactlyonce is Watermill's
// real-world-examples/exactly-once-delivery-counter on Berth: an HTTP
// server publishes one message per POST /count/{counterUUID}, and a worker
// adds one to that counter in the database, reading the value and writing
// it back in the handler's transaction, which commits with the message's
// ack. The driver sends the requests while it kills the worker with
// SIGKILL (no graceful shutdown, as in the original) and, on PostgreSQL,
// cuts every database connection of the worker; at the end the counter
// must equal the number of requests: nothing lost, nothing counted twice.
//
// The port changes the constructors (transport.OpenPublisher and
// transport.OpenSubscriber by URL), watermill-sql's sql.TxFromContext for
// transport.TxFromContext, and the counter's read, which creates the row
// first and locks it (SELECT … FOR UPDATE on PostgreSQL; SQLite runs one
// writer at a time): a Berth subscriber runs handlers concurrently, where
// watermill-sql's ran them one at a time, and two concurrent first
// messages would both read "no row" and both write 1.
//
//	BERTH_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go run ./examples/watermill/exactlyonce
//
// With no BERTH_URL it runs on SQLite in a temporary file. The three roles
// are processes of this binary: exactlyonce [run] starts the server and
// the worker as its children (EXACTLYONCE_ROLE=server, worker), as the
// original's docker-compose does. Its test runs it on PostgreSQL and SQLite.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlite"
)

const topic = "counter"

// workerApp is the worker's application_name on PostgreSQL, by which the
// driver finds its connections to cut.
const workerApp = "exactlyonce-worker"

type messagePayload struct {
	CounterUUID string `json:"counter_uuid"`
}

// openDB opens the user's own handle on the database of berthURL (the
// counter table's).
func openDB(berthURL string) (*sql.DB, func(), error) {
	u, err := url.Parse(berthURL)
	if err != nil {
		return nil, nil, err
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		q := u.Query()
		for k := range q {
			switch k {
			case "sslmode", "search_path", "application_name":
			default:
				q.Del(k) // Berth's parameters
			}
		}
		u.RawQuery = q.Encode()
		db, err := postgres.Open(u.String(), 4)
		if err != nil {
			return nil, nil, err
		}
		return db, func() { _ = db.Close() }, nil
	case "sqlite":
		db, closer, err := sqlite.Open(strings.TrimPrefix(berthURL[:len(berthURL)-len(u.RawQuery)], "sqlite://"))
		if err != nil {
			return nil, nil, err
		}
		return db, func() { _ = closer.Close() }, nil
	}
	return nil, nil, fmt.Errorf("exactlyonce: no counter database for %s URLs", u.Scheme)
}

func isPostgres(berthURL string) bool {
	return strings.HasPrefix(berthURL, "postgres://") || strings.HasPrefix(berthURL, "postgresql://")
}

// createSchema is the original's schema.sql.
func createSchema(db *sql.DB) error {
	_, err := db.Exec(`CREATE TABLE IF NOT EXISTS counter (
    id VARCHAR(36) NOT NULL PRIMARY KEY,
    value INT NOT NULL
)`)
	return err
}

// server is the original's server/main.go: POST /count/{counterUUID}
// publishes a message.
func server(ctx context.Context, berthURL, addr string, logger watermill.LoggerAdapter) error {
	publisher, err := transport.OpenPublisher(ctx, berthURL, transport.WithLogger(logger))
	if err != nil {
		return err
	}
	defer publisher.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /count/{counterUUID}", func(w http.ResponseWriter, r *http.Request) {
		payload, err := json.Marshal(messagePayload{CounterUUID: r.PathValue("counterUUID")})
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if err := publisher.Publish(topic, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
			logger.Error("publish failed", err, nil)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// worker is the original's worker/main.go: a router whose handler counts
// in the handler's transaction.
func worker(ctx context.Context, berthURL string, logger watermill.LoggerAdapter) error {
	db, closeDB, err := openDB(berthURL)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := createSchema(db); err != nil {
		return err
	}
	subscriber, err := transport.OpenSubscriber(ctx, berthURL, transport.WithLogger(logger))
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return err
	}
	forUpdate := ""
	if isPostgres(berthURL) {
		forUpdate = " FOR UPDATE"
	}
	router.AddConsumerHandler("counter", topic, subscriber, func(msg *message.Message) error {
		tx, err := transport.TxFromContext(msg.Context())
		if err != nil {
			return err
		}
		payload := messagePayload{}
		if err := json.Unmarshal(msg.Payload, &payload); err != nil {
			return fmt.Errorf("unable to unmarshal payload: %w", err)
		}
		// As fragile as the original: read the value, then write it back.
		// Handlers run concurrently here, so the row exists before it is
		// read, and the read locks it: two first messages would both read
		// "no row" and both write 1.
		_, err = tx.ExecContext(msg.Context(), `INSERT INTO counter (id, value) VALUES ($1, 0) ON CONFLICT (id) DO NOTHING`, payload.CounterUUID)
		if err != nil {
			return fmt.Errorf("can't create counter: %w", err)
		}
		var value int
		err = tx.QueryRowContext(msg.Context(), `SELECT value FROM counter WHERE id = $1`+forUpdate, payload.CounterUUID).Scan(&value)
		if err != nil {
			return fmt.Errorf("can't get counter value: %w", err)
		}
		_, err = tx.ExecContext(msg.Context(), `UPDATE counter SET value = $2 WHERE id = $1`, payload.CounterUUID, value+1)
		if err != nil {
			return fmt.Errorf("can't update counter value: %w", err)
		}
		return nil
	})
	return router.Run(ctx)
}

// A driver is the original's run.go.
type driver struct {
	URL      string
	Messages int
	Senders  int
	// KillWorkerAt and CutDatabaseAt are the request numbers at which the
	// worker is killed (SIGKILL, then restarted) and its database
	// connections are cut (PostgreSQL only).
	KillWorkerAt, CutDatabaseAt []int
	Out                         func(format string, args ...any)
}

// run sends the requests, with the faults, and waits until the counter
// equals Messages, and stays so. It returns the counter's value.
func (d driver) run(ctx context.Context) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	db, closeDB, err := openDB(d.URL)
	if err != nil {
		return 0, err
	}
	defer closeDB()
	if err := createSchema(db); err != nil {
		return 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()

	var children sync.WaitGroup
	defer children.Wait() // after cancel, which kills them
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	launch := func(role, berthURL string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), "EXACTLYONCE_ROLE="+role, "BERTH_URL="+berthURL, "EXACTLYONCE_ADDR="+addr)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.Cancel = func() error { return cmd.Process.Kill() }
		if err := cmd.Start(); err != nil {
			d.Out("start %s: %v", role, err)
			return nil
		}
		return cmd
	}
	workerURL := d.URL
	if isPostgres(d.URL) {
		workerURL = withParam(d.URL, "application_name", workerApp)
	}
	// A short lease and fetch timeout: a killed worker's messages return
	// within seconds.
	workerURL = withParam(withParam(withParam(workerURL, "lease", "2s"), "fetch_timeout", "2s"), "sweep_interval", "500ms")
	server := launch("server", d.URL)
	if server == nil {
		return 0, errors.New("exactlyonce: the server did not start")
	}
	children.Add(1)
	go func() { defer children.Done(); _ = server.Wait() }()
	// The worker restarts whenever it exits, as the original's
	// docker-compose service does (restart: unless-stopped): killed here,
	// or ended by an error of its own (its Subscribe's connection cut).
	var (
		workerMu sync.Mutex
		worker   *exec.Cmd
	)
	children.Add(1)
	go func() {
		defer children.Done()
		for ctx.Err() == nil {
			cmd := launch("worker", workerURL)
			if cmd == nil {
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
				continue
			}
			workerMu.Lock()
			worker = cmd
			workerMu.Unlock()
			_ = cmd.Wait()
		}
	}()
	killWorker := func() {
		workerMu.Lock()
		defer workerMu.Unlock()
		if worker != nil {
			_ = worker.Process.Signal(syscall.SIGKILL)
		}
	}

	counterUUID := watermill.NewUUID()
	kills, cuts := set(d.KillWorkerAt), set(d.CutDatabaseAt)
	sends := make(chan struct{})
	var senders sync.WaitGroup
	for range max(d.Senders, 1) {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for range sends {
				d.send(ctx, "http://"+addr+"/count/"+counterUUID)
			}
		}()
	}
	for i := range d.Messages {
		select {
		case sends <- struct{}{}:
		case <-ctx.Done():
		}
		if kills[i] {
			d.Out("killing the worker (SIGKILL) at request %d", i)
			killWorker() // and it restarts
		}
		if cuts[i] && isPostgres(d.URL) {
			n := 0
			_ = db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, workerApp).Scan(&n)
			d.Out("cut %d database connections of the worker at request %d", n, i)
		}
	}
	close(sends)
	senders.Wait()

	// The original's check: the counter reaches the count, and stays.
	value := 0
	matched := time.Time{}
	for ctx.Err() == nil {
		err := db.QueryRowContext(ctx, `SELECT value FROM counter WHERE id = $1`, counterUUID).Scan(&value)
		switch {
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			d.Out("read the counter: %v", err)
		case value > d.Messages:
			return value, fmt.Errorf("counted %d of %d messages: some twice", value, d.Messages)
		case value == d.Messages && matched.IsZero():
			matched = time.Now()
		case value == d.Messages && time.Since(matched) > 2*time.Second:
			return value, nil
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return value, fmt.Errorf("counted %d of %d messages: %w", value, d.Messages, ctx.Err())
}

// send posts until the server answers 204, as the original does.
func (d driver) send(ctx context.Context, u string) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			time.Sleep(50 * time.Millisecond) // the server is starting
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusNoContent {
			return
		}
	}
}

func set(xs []int) map[int]bool {
	m := map[int]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func withParam(rawURL, k, v string) string {
	sep := "?"
	if strings.Contains(rawURL, "?") {
		sep = "&"
	}
	return rawURL + sep + url.QueryEscape(k) + "=" + url.QueryEscape(v)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	flag.Parse()
	u := os.Getenv("BERTH_URL")
	if u == "" {
		dir, err := os.MkdirTemp("", "berth-exactlyonce-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		u = "sqlite://" + filepath.Join(dir, "counter.db")
	}
	logger := watermill.NewStdLogger(false, false)
	role := flag.Arg(0)
	if r := os.Getenv("EXACTLYONCE_ROLE"); r != "" {
		role = r // a child of the driver
	}
	var err error
	switch role {
	case "server":
		err = server(ctx, u, os.Getenv("EXACTLYONCE_ADDR"), logger)
	case "worker":
		err = worker(ctx, u, logger)
	case "", "run":
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		d := driver{URL: u, Messages: 2000, Senders: 5,
			KillWorkerAt: []int{100, 800, 850, 1500}, CutDatabaseAt: []int{50, 600, 1200},
			Out: func(format string, args ...any) { fmt.Printf(format+"\n", args...) }}
		var n int
		if n, err = d.run(ctx); err == nil {
			fmt.Printf("expected counter value %d is matching DB value %d\n", d.Messages, n)
		}
	default:
		err = fmt.Errorf("unknown role %q (run, server or worker)", role)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "exactlyonce:", err)
		os.Exit(1)
	}
}
