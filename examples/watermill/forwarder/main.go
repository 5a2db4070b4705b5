// Command forwarder is Watermill's
// real-world-examples/transactional-events-forwarder on Berth: a lottery
// service saves its winner and the LotteryConcluded event in one SQL
// transaction, through Watermill's components/forwarder, which wraps the
// event in an envelope naming its destination topic, stores it in the SQL
// queue, and forwards it from there to another broker (Google Cloud
// Pub/Sub in the original), where a prize sender reads it.
//
// The port changes the constructors only: the in-transaction publisher is
// transport.PublishInTx(publisher, tx) (watermill-sql: sql.NewPublisher on
// sql.TxFromStdSQL(tx)), decorated by forwarder.NewPublisher as in the
// original; the forwarder reads the queue with a Berth subscriber; the
// broker is any Berth URL (TARGET_URL: an sqs:// queue, or mem:// by
// default). The original also shows two ways that go wrong (publish then
// save, save then publish); the program runs the transactional one, which
// is the one it exists to show, with its simulated failure (every second
// lottery fails after writing and rolls back).
//
//	BERTH_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go run ./examples/watermill/forwarder
//
// With no BERTH_URL the queue is SQLite in a temporary file. Its test runs
// it on PostgreSQL and SQLite and checks that the prize sender receives
// exactly the saved lotteries' events, each once, on the destination
// topic, unwrapped.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all"
)

const (
	forwarderSQLTopic = "eventsToForward"   // the original's MySQL topic
	eventTopic        = "lottery-concluded" // the original's Google Cloud topic
)

type lotteryConcluded struct {
	LotteryID int `json:"lottery_id"`
}

// config is what a run varies.
type config struct {
	URL       string        // the SQL queue, and the lotteries table's database
	TargetURL string        // the broker the events are forwarded to
	Lotteries int           // lotteries to conclude; every second one fails and rolls back
	Every     time.Duration // between two (the original: 5s)
	Logger    watermill.LoggerAdapter
}

// result is what a run saw: the lotteries saved and rolled back, and the
// events the prize sender received, by lottery id (how often each came).
type result struct {
	Saved, RolledBack []int
	Prizes            map[int]int
	// Enveloped counts events that reached the prize sender still in the
	// forwarder's envelope (none should).
	Enveloped int
}

// run concludes cfg.Lotteries lotteries, forwards their events and waits
// until every saved lottery's event reached the prize sender.
func run(ctx context.Context, cfg config) (*result, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	publisher, err := transport.OpenPublisher(ctx, cfg.URL, transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	defer publisher.Close()
	// The application's own writes go to the database the publisher
	// writes to, on its pool (on SQLite the process's one connection of
	// the file, which the transaction and its publish must share).
	db, err := transport.DBOf(publisher)
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS lotteries (lottery_id INT PRIMARY KEY, winner VARCHAR(255) NOT NULL)`); err != nil {
		return nil, err
	}

	// The forwarder: from the SQL queue to the broker.
	sqlSubscriber, err := transport.OpenSubscriber(ctx, cfg.URL, transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	brokerPublisher, err := transport.OpenPublisher(ctx, cfg.TargetURL, transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	defer brokerPublisher.Close()
	fwd, err := forwarder.NewForwarder(sqlSubscriber, brokerPublisher, logger, forwarder.Config{
		ForwarderTopic: forwarderSQLTopic,
		CloseTimeout:   5 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	fwdDone := make(chan error, 1)
	go func() { fwdDone <- fwd.Run(ctx) }()
	defer func() {
		_ = fwd.Close() // closes sqlSubscriber too
		<-fwdDone
	}()
	select {
	case <-fwd.Running():
	case err := <-fwdDone:
		return nil, err
	}

	// The prize sender, reading the broker.
	brokerSubscriber, err := transport.OpenSubscriber(ctx, cfg.TargetURL, transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	defer brokerSubscriber.Close()
	if si, ok := brokerSubscriber.(message.SubscribeInitializer); ok {
		if err := si.SubscribeInitialize(eventTopic); err != nil {
			return nil, err
		}
	}
	events, err := brokerSubscriber.Subscribe(ctx, eventTopic)
	if err != nil {
		return nil, err
	}
	res := &result{Prizes: map[int]int{}}
	var mu sync.Mutex
	gotAll := make(chan struct{})
	var once sync.Once
	go func() {
		for msg := range events {
			e := lotteryConcluded{}
			err := json.Unmarshal(msg.Payload, &e)
			msg.Ack()
			mu.Lock()
			if err != nil || e.LotteryID == 0 {
				res.Enveloped++ // not the event itself
			} else {
				res.Prizes[e.LotteryID]++
				logger.Info("Sending prize", watermill.LogFields{"lottery_id": e.LotteryID})
			}
			done := len(res.Saved)+len(res.RolledBack) == cfg.Lotteries && covered(res)
			mu.Unlock()
			if done {
				once.Do(func() { close(gotAll) })
			}
		}
	}()

	// The lottery service.
	users := []string{"Mike", "Dwight", "Jim", "Pamela"}
	for id := 1; id <= cfg.Lotteries; id++ {
		winner := users[id%len(users)]
		err := persistDataAndPublishEventInTransaction(ctx, db, publisher, id, winner, id%2 == 0)
		mu.Lock()
		switch {
		case err == nil:
			res.Saved = append(res.Saved, id)
		case errors.Is(err, errSimulated):
			res.RolledBack = append(res.RolledBack, id)
			logger.Info("Rolled the transaction back", watermill.LogFields{"lottery_id": id, "error": err.Error()})
		}
		done := len(res.Saved)+len(res.RolledBack) == cfg.Lotteries && covered(res)
		mu.Unlock()
		if err != nil && !errors.Is(err, errSimulated) {
			return nil, err
		}
		if done {
			once.Do(func() { close(gotAll) })
		}
		select {
		case <-time.After(cfg.Every):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	select {
	case <-gotAll:
	case <-ctx.Done():
		return nil, fmt.Errorf("not every saved lottery's event arrived: %w", ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	out := *res
	out.Prizes = map[int]int{}
	for k, v := range res.Prizes {
		out.Prizes[k] = v
	}
	return &out, nil
}

// covered reports whether every saved lottery's event has arrived.
func covered(r *result) bool {
	for _, id := range r.Saved {
		if r.Prizes[id] == 0 {
			return false
		}
	}
	return true
}

var errSimulated = errors.New("simulated error")

// persistDataAndPublishEventInTransaction is the original's third way:
// the winner and the event, through the SQL queue to the broker, in one
// transaction; with fail, something after both fails and it rolls back.
func persistDataAndPublishEventInTransaction(ctx context.Context, db *sql.DB, publisher message.Publisher, lotteryID int, winner string, fail bool) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
	}()
	if _, err = tx.ExecContext(ctx, `INSERT INTO lotteries (lottery_id, winner) VALUES ($1, $2)`, lotteryID, winner); err != nil {
		return err
	}
	txPublisher, err := transport.PublishInTx(publisher, tx)
	if err != nil {
		return err
	}
	// Decorate the publisher so it wraps the event in an envelope the
	// forwarder understands: published to the broker's topic, stored in
	// the SQL queue.
	txPublisher = forwarder.NewPublisher(txPublisher, forwarder.PublisherConfig{ForwarderTopic: forwarderSQLTopic})
	payload, err := json.Marshal(lotteryConcluded{LotteryID: lotteryID})
	if err != nil {
		return err
	}
	if err = txPublisher.Publish(eventTopic, message.NewMessage(watermill.NewULID(), payload)); err != nil {
		return err
	}
	if fail {
		return errSimulated
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	u := os.Getenv("BERTH_URL")
	if u == "" {
		dir, err := os.MkdirTemp("", "berth-forwarder-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		u = "sqlite://" + filepath.Join(dir, "forwarder.db")
	}
	target := os.Getenv("TARGET_URL")
	if target == "" {
		target = "mem://forwarder-target"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := run(ctx, config{URL: u, TargetURL: target, Lotteries: 8, Every: 500 * time.Millisecond,
		Logger: watermill.NewStdLogger(false, false)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "forwarder:", err)
		os.Exit(1)
	}
	fmt.Printf("saved %d lotteries, rolled back %d; %d prizes sent\n", len(res.Saved), len(res.RolledBack), len(res.Prizes))
}
