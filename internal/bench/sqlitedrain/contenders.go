package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"maragu.dev/goqite"
	"maragu.dev/goqite/jobs"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

const (
	topic = "drain"
	batch = 500 // messages per publish call or insert transaction
)

// runBerth publishes with Berth's publisher and drains through the
// Watermill subscriber channel, acking each message after the handler.
func runBerth(ctx context.Context, cfg config, path string, t *tracker) (int, time.Duration, error) {
	subCfg := sqlite.SubscriberConfig{DSN: path, Pipeline: receiver.Config{Concurrency: cfg.Workers}}
	sub, err := sqlite.NewSubscriber(subCfg, nil)
	if err != nil {
		return 0, 0, err
	}
	defer sub.Close()
	// The queue exists (and is subscribed) before the backlog goes in.
	if err := sub.SubscribeInitialize(topic); err != nil {
		return 0, 0, err
	}
	pub, err := sqlite.NewPublisher(sqlite.PublisherConfig{DSN: path}, nil)
	if err != nil {
		return 0, 0, err
	}
	for start := 0; start < cfg.Messages; start += batch {
		msgs := make([]*message.Message, 0, batch)
		for i := start; i < min(start+batch, cfg.Messages); i++ {
			msgs = append(msgs, message.NewMessage(watermill.NewUUID(), payload(i, cfg.Size)))
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			_ = pub.Close()
			return 0, 0, err
		}
	}
	if err := pub.Close(); err != nil {
		return 0, 0, err
	}
	count, closeCount, err := countRows(path, `SELECT count(*) FROM `+sqlqueue.QueueTableName(sqlqueue.DefaultTablePrefix, topic, ""))
	if err != nil {
		return 0, 0, err
	}
	defer closeCount()

	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	began := time.Now()
	ch, err := sub.Subscribe(subCtx, topic)
	if err != nil {
		return 0, 0, err
	}
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() {
			for m := range ch {
				time.Sleep(cfg.Handler)
				t.handle(t.index(m.Payload))
				m.Ack()
			}
		})
	}
	left, end, err := waitDrained(ctx, t, count)
	stop()
	err = errors.Join(err, sub.Close())
	wg.Wait()
	return left, end.Sub(began), err
}

// goqiteSchema is goqite v0.4.0's schema_sqlite.sql, which the module does
// not export; the statements are goqite's own.
const goqiteSchema = `create table goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;

create trigger goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;

create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);`

// fillGoqite creates goqite's table in a fresh database at path, sends the
// backlog with send, batch messages per transaction, and returns the queue
// and the count of its rows; done closes both databases.
func fillGoqite(ctx context.Context, cfg config, path string, send func(*sql.Tx, *goqite.Queue, goqite.Message) error) (*goqite.Queue, func(context.Context) (int, error), func(), error) {
	db, err := openOne(path)
	if err != nil {
		return nil, nil, nil, err
	}
	fail := func(err error) (*goqite.Queue, func(context.Context) (int, error), func(), error) {
		_ = db.Close()
		return nil, nil, nil, err
	}
	if _, err := db.ExecContext(ctx, goqiteSchema); err != nil {
		return fail(fmt.Errorf("goqite schema: %w", err))
	}
	q := goqite.New(goqite.NewOpts{DB: db, Name: topic})
	for start := 0; start < cfg.Messages; start += batch {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fail(err)
		}
		for i := start; i < min(start+batch, cfg.Messages); i++ {
			if err := send(tx, q, goqite.Message{Body: payload(i, cfg.Size)}); err != nil {
				_ = tx.Rollback()
				return fail(err)
			}
		}
		if err := tx.Commit(); err != nil {
			return fail(err)
		}
	}
	count, closeCount, err := countRows(path, `SELECT count(*) FROM goqite`)
	if err != nil {
		return fail(err)
	}
	return q, count, func() { closeCount(); _ = db.Close() }, nil
}

// runGoqite fills a goqite queue with jobs.CreateTx and drains it with
// goqite's job runner (Limit: workers; the runner deletes each message after
// its job returns). poll 0 is the runner's default poll interval (100 ms).
func runGoqite(ctx context.Context, cfg config, path string, t *tracker, poll time.Duration) (int, time.Duration, error) {
	q, count, done, err := fillGoqite(ctx, cfg, path, func(tx *sql.Tx, q *goqite.Queue, m goqite.Message) error {
		_, err := jobs.CreateTx(ctx, tx, q, "drain", m)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	defer done()

	r := jobs.NewRunner(jobs.NewRunnerOpts{Limit: cfg.Workers, PollInterval: poll, Queue: q})
	r.Register("drain", func(_ context.Context, m []byte) error {
		time.Sleep(cfg.Handler)
		t.handle(t.index(m))
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	stopped := make(chan struct{})
	began := time.Now()
	go func() { defer close(stopped); r.Start(runCtx) }()
	left, end, err := waitDrained(ctx, t, count)
	stop()
	<-stopped
	return left, end.Sub(began), err
}

// runGoqiteAPI fills the queue as runGoqite does and drains it with
// goqite's Receive/Delete API: workers goroutines, each receiving with
// ReceiveAndWait (polling every poll), running the handler and deleting.
func runGoqiteAPI(ctx context.Context, cfg config, path string, t *tracker, poll time.Duration) (int, time.Duration, error) {
	q, count, done, err := fillGoqite(ctx, cfg, path, func(tx *sql.Tx, q *goqite.Queue, m goqite.Message) error {
		return q.SendTx(ctx, tx, m)
	})
	if err != nil {
		return 0, 0, err
	}
	defer done()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	began := time.Now()
	for range cfg.Workers {
		wg.Go(func() {
			for runCtx.Err() == nil {
				m, err := q.ReceiveAndWait(runCtx, poll)
				if err == nil && m != nil {
					time.Sleep(cfg.Handler)
					t.handle(t.index(m.Body))
					err = q.Delete(context.WithoutCancel(runCtx), m.ID)
				}
				if err != nil && runCtx.Err() == nil {
					errMu.Lock()
					firstErr = cmp.Or(firstErr, err)
					errMu.Unlock()
					stop()
				}
			}
		})
	}
	left, end, err := waitDrained(runCtx, t, count)
	stop()
	wg.Wait()
	return left, end.Sub(began), errors.Join(firstErr, err)
}

// drainArgs is the River job: the message index and a padding string that
// makes the encoded args the payload size.
type drainArgs struct {
	I   int    `json:"i"`
	Pad string `json:"pad"`
}

func (drainArgs) Kind() string { return "drain" }

type drainWorker struct {
	river.WorkerDefaults[drainArgs]
	handler time.Duration
	t       *tracker
}

func (w drainWorker) Work(_ context.Context, j *river.Job[drainArgs]) error {
	time.Sleep(w.handler)
	w.t.handle(j.Args.I)
	return nil
}

// runRiver migrates River's schema with rivermigrate, inserts the backlog
// with InsertManyTx and drains it with one client (MaxWorkers: workers) at
// River's defaults or, tuned, with FetchCooldown 1 ms and FetchPollInterval
// 10 ms. A job is done when its row is completed.
func runRiver(ctx context.Context, cfg config, path string, t *tracker, tuned bool) (int, time.Duration, error) {
	db, err := openOne(path)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	driver := riversqlite.New(db)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return 0, 0, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, 0, fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, drainWorker{handler: cfg.Handler, t: t})
	rc := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		Workers: workers,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if tuned {
		rc.FetchCooldown, rc.FetchPollInterval = time.Millisecond, 10*time.Millisecond
	}
	client, err := river.NewClient(driver, rc)
	if err != nil {
		return 0, 0, err
	}
	pad := strings.Repeat("x", max(cfg.Size-len(`{"i":00000,"pad":""}`), 0))
	for start := 0; start < cfg.Messages; start += batch {
		params := make([]river.InsertManyParams, 0, batch)
		for i := start; i < min(start+batch, cfg.Messages); i++ {
			params = append(params, river.InsertManyParams{Args: drainArgs{I: i, Pad: pad}})
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, 0, err
		}
		if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
			_ = tx.Rollback()
			return 0, 0, err
		}
		if err := tx.Commit(); err != nil {
			return 0, 0, err
		}
	}
	count, closeCount, err := countRows(path, `SELECT count(*) FROM river_job WHERE state <> 'completed'`)
	if err != nil {
		return 0, 0, err
	}
	defer closeCount()

	began := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, 0, err
	}
	left, end, err := waitDrained(ctx, t, count)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err = errors.Join(err, client.Stop(sctx))
	return left, end.Sub(began), err
}
