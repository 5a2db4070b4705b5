package sqlbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berth-go/berth/internal/bench"
)

// RunIsolated runs rc on PostgreSQL in a database of its own, created for
// the run on the server of rawURL and dropped afterwards, and adds
// db_tx_per_msg: the growth of that database's xact_commit +
// xact_rollback (pg_stat_database) over the whole run, divided by the
// messages processed. Everything the run does counts (the publisher's
// inserts and NOTIFYs, every transaction a LISTENing backend runs for an
// incoming notification, the subscribers' statements, and the run's set-up
// and tear-down, a few dozen transactions in all), and nothing else does:
// other clients of the server use other databases.
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
	before, err := txs()
	if err != nil {
		return res, err
	}
	res, err = h.Run(ctx, rc)
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
	if res.Messages > 0 {
		res.Metrics["db_tx_per_msg"] = float64(after-before) / float64(res.Messages)
	}
	res.Notes = joinNotes(append([]string{fmt.Sprintf("database %s: %d transactions", name, after-before)}, res.Notes))
	return res, nil
}
