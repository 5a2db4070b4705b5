package sqlbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/transport/postgres"
)

// RunIsolated runs rc on PostgreSQL in a database of its own, created for
// the run on the server of rawURL and dropped afterwards, and adds
// db_tx_per_msg: the growth of that database's xact_commit +
// xact_rollback (pg_stat_database) over the whole run, divided by the
// messages processed. Everything the run does counts (the publisher's
// inserts and NOTIFYs, every transaction a LISTENing backend runs for an
// incoming notification, the subscribers' statements, and the run's set-up
// and tear-down, a few dozen transactions in all), and nothing else does:
// other clients of the server use other databases. It also counts the
// wake-up notifications (LISTEN on postgres.WakeChannel in that database)
// as notifies_per_msg; the transactions the counting backend itself runs
// for them (one per notification) are left out of db_tx_per_msg.
func RunIsolated(ctx context.Context, rawURL string, rc RunConfig) (res bench.Result, err error) {
	name, dsn, drop, err := createDatabase(ctx, rawURL)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, drop()) }()
	admin, err := sql.Open("pgx", rawURL)
	if err != nil {
		return res, err
	}
	defer admin.Close()
	admin.SetMaxOpenConns(1)
	txs := func() (int64, error) {
		var n int64
		err := admin.QueryRowContext(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, name).Scan(&n)
		return n, err
	}
	db, err := openPostgres(ctx, dsn)
	if err != nil {
		return res, err
	}
	h := newHarness(db)
	defer func() { err = errors.Join(err, h.Close()) }()
	notes, err := countNotifications(ctx, dsn)
	if err != nil {
		return res, err
	}
	before, err := txs()
	if err != nil {
		notes.stop()
		return res, err
	}
	res, err = h.Run(ctx, rc)
	notified := notes.stop()
	if err != nil {
		return res, err
	}
	// A backend reports its transactions to the statistics at most once a
	// second, and when it exits: the run's pools are closed by now.
	time.Sleep(1500 * time.Millisecond)
	after, err := txs()
	if err != nil {
		return res, err
	}
	tx := after - before - notified
	if res.Messages > 0 {
		res.Metrics["db_tx_per_msg"] = float64(tx) / float64(res.Messages)
		res.Metrics["notifies_per_msg"] = float64(notified) / float64(res.Messages)
	}
	res.Notes = joinNotes(append([]string{fmt.Sprintf("database %s: %d transactions, %d notifications", name, tx, notified)}, res.Notes))
	return res, nil
}

// notificationCounter counts the wake-up notifications of one database.
type notificationCounter struct {
	cancel context.CancelFunc
	done   chan struct{}
	n      int64
}

func countNotifications(ctx context.Context, dsn string) (*notificationCounter, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+postgres.WakeChannel); err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	c := &notificationCounter{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer conn.Close(context.WithoutCancel(ctx))
		for {
			if _, err := conn.WaitForNotification(wctx); err != nil {
				return
			}
			c.n++
		}
	}()
	return c, nil
}

// stop ends the count and returns it.
func (c *notificationCounter) stop() int64 {
	c.cancel()
	<-c.done
	return c.n
}
