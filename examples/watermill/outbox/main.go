// Command outbox is Watermill's real-world-examples/transactional-events
// on Berth: a service saves its aggregate (a user) and the domain event
// (UserSignedUp) in one SQL transaction, and a router forwards the events
// from the SQL queue to another broker (Kafka in the original), so an
// event exists if, and only if, its aggregate was saved.
//
// The port changes the constructors: the event is published with
// transport.PublishInTx(publisher, tx) (watermill-sql: a new publisher on
// sql.TxFromStdSQL(tx) per transaction), the forwarder reads the queue with
// a Berth subscriber, and the target is any Berth URL (TARGET_URL: an
// sqs:// queue, or mem:// by default, where the program also reads the
// forwarded events back). It adds one thing to show the point: every third
// sign-up fails after writing, and its transaction rolls back with its
// event.
//
//	BERTH_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go run ./examples/watermill/outbox
//
// With no BERTH_URL the queue is SQLite in a temporary file. Its test runs
// it on PostgreSQL and SQLite and checks that exactly the saved users'
// events arrive, each once.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all"
)

const (
	queueTopic  = "events" // the original's MySQL table
	targetTopic = "events" // the original's Kafka topic
)

type event struct {
	Name       string `json:"name"`
	UserID     string `json:"user_id"` // not in the original: the test matches events to users
	OccurredAt string `json:"occurred_at"`
}

// config is what a run varies.
type config struct {
	URL       string        // the SQL queue, and the users table's database
	TargetURL string        // where the events are forwarded
	SignUps   int           // transactions to run; every third rolls back
	Every     time.Duration // between two (the original: 1s)
	Logger    watermill.LoggerAdapter
}

// result is what a run saw: the users saved, and the forwarded events by
// user id (how often each arrived).
type result struct {
	Saved     []string
	RolledBak []string
	Events    map[string]int
}

// run signs cfg.SignUps users up, forwards their events and waits until
// every saved user's event reached the target (reading it back there).
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
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS users (id VARCHAR(36) PRIMARY KEY, signed_up_at VARCHAR(40) NOT NULL)`); err != nil {
		return nil, err
	}
	// One event at a time, in the order they committed, as watermill-sql's
	// subscriber forwarded them.
	subscriber, err := transport.OpenSubscriber(ctx, withParam(cfg.URL, "concurrency", "1"), transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	target, err := transport.OpenPublisher(ctx, cfg.TargetURL, transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	defer target.Close()
	// The reader of the target (the original's `mill kafka consume`).
	reader, err := transport.OpenSubscriber(ctx, cfg.TargetURL, transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	defer reader.Close()
	if si, ok := reader.(message.SubscribeInitializer); ok {
		if err := si.SubscribeInitialize(targetTopic); err != nil {
			return nil, err
		}
	}
	forwarded, err := reader.Subscribe(ctx, targetTopic)
	if err != nil {
		return nil, err
	}

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return nil, err
	}
	router.AddMiddleware(middleware.Recoverer)
	router.AddHandler("sql-to-target", queueTopic, subscriber, targetTopic, target,
		func(msg *message.Message) ([]*message.Message, error) {
			consumed := event{}
			if err := json.Unmarshal(msg.Payload, &consumed); err != nil {
				return nil, err
			}
			logger.Info("received event", watermill.LogFields{"name": consumed.Name, "uuid": msg.UUID})
			return []*message.Message{msg}, nil
		})
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	defer func() {
		_ = router.Close()
		<-routerDone
	}()
	select {
	case <-router.Running():
	case err := <-routerDone:
		return nil, err
	}

	res := &result{Events: map[string]int{}}
	var mu sync.Mutex
	gotAll := make(chan struct{})
	go func() {
		for msg := range forwarded {
			e := event{}
			_ = json.Unmarshal(msg.Payload, &e)
			msg.Ack()
			mu.Lock()
			res.Events[e.UserID]++
			done := len(res.Saved) > 0 && len(res.Saved)+len(res.RolledBak) == cfg.SignUps && covered(res)
			mu.Unlock()
			if done {
				select {
				case <-gotAll:
				default:
					close(gotAll)
				}
			}
		}
	}()

	// The original's simulateEvents: the aggregate and its event in one
	// transaction.
	for i := range cfg.SignUps {
		id := watermill.NewUUID()
		saved, err := signUp(ctx, db, publisher, id, i%3 == 2)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		if saved {
			res.Saved = append(res.Saved, id)
		} else {
			res.RolledBak = append(res.RolledBak, id)
		}
		done := len(res.Saved)+len(res.RolledBak) == cfg.SignUps && covered(res)
		mu.Unlock()
		if done {
			close(gotAll)
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
		return nil, fmt.Errorf("not every saved user's event arrived: %w", ctx.Err())
	}
	// Rolled-back events would have arrived by now, with the others.
	mu.Lock()
	defer mu.Unlock()
	out := *res
	out.Events = map[string]int{}
	for k, v := range res.Events {
		out.Events[k] = v
	}
	return &out, nil
}

func withParam(rawURL, k, v string) string {
	sep := "?"
	if strings.Contains(rawURL, "?") {
		sep = "&"
	}
	return rawURL + sep + url.QueryEscape(k) + "=" + url.QueryEscape(v)
}

// covered reports whether every saved user's event has arrived.
func covered(r *result) bool {
	for _, id := range r.Saved {
		if r.Events[id] == 0 {
			return false
		}
	}
	return true
}

// signUp saves user id and publishes its UserSignedUp event in one
// transaction; with fail, the sign-up fails after both and rolls back.
func signUp(ctx context.Context, db *sql.DB, publisher message.Publisher, id string, fail bool) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() // a no-op after Commit
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if _, err := tx.ExecContext(ctx, `INSERT INTO users (id, signed_up_at) VALUES ($1, $2)`, id, now); err != nil {
		return false, err
	}
	txPublisher, err := transport.PublishInTx(publisher, tx)
	if err != nil {
		return false, err
	}
	payload, err := json.Marshal(event{Name: "UserSignedUp", UserID: id, OccurredAt: now})
	if err != nil {
		return false, err
	}
	if err := txPublisher.Publish(queueTopic, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
		return false, err
	}
	if fail {
		return false, tx.Rollback() // something after the publish failed: no user, no event
	}
	return true, tx.Commit()
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	u := os.Getenv("BERTH_URL")
	if u == "" {
		dir, err := os.MkdirTemp("", "berth-outbox-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		u = "sqlite://" + filepath.Join(dir, "outbox.db")
	}
	target := os.Getenv("TARGET_URL")
	if target == "" {
		target = "mem://outbox-target"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := run(ctx, config{URL: u, TargetURL: target, SignUps: 9, Every: 200 * time.Millisecond,
		Logger: watermill.NewStdLogger(false, false)})
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
	fmt.Printf("saved %d users, rolled back %d; %d events forwarded\n", len(res.Saved), len(res.RolledBak), len(res.Events))
}
