package sqlqueuetest

import (
	"context"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/guard/guardtest"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// A logger whose every method panics costs the sweeper its log lines,
// never its goroutine or the process: while the database fails every sweep
// (the queue table dropped under it), the sweeper logs "sweep failed" into
// the panicking logger again and again; once the table is back, it still
// sweeps (it recovers a row whose lease expired). Then the pool is closed
// under it, as a database that went away for good: the sweeper keeps
// failing, logging and running until Close, which returns.
func testSweeperPanickingLogger(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 3)
	logger := &guardtest.PanicLogger{}
	cfg := sqlqueue.SubscriberConfig{
		DB: db, Tables: f.env.Tables,
		SweepInterval: 20 * time.Millisecond, FetchTimeout: time.Second, Lease: time.Second,
	}
	src, err := sqlqueue.NewSource(context.Background(), h.Dialect, cfg, "guarded", logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	q := src.Queue()

	// Down: every sweep fails, and each failure panics in the logger.
	if _, err := db.ExecContext(context.Background(), "DROP TABLE "+q.Table); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "three failed sweeps logged", func() bool { return logger.Count("sweep failed") >= 3 })

	// Back: another source provisions the table again; a row claimed and
	// never begun is recovered once its fetch timeout passes.
	f.openSource(t, sqlqueue.SubscriberConfig{DB: db, Tables: f.env.Tables, SweepInterval: -1}, "guarded")
	PublishN(t, f.newPub(t, db), "guarded", 1)
	ds, err := src.Claim(context.Background(), 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim = %d, %v", len(ds), err)
	}
	waitFor(t, 30*time.Second, "the sweeper to recover the expired row", func() bool { return src.Stats().Recovered >= 1 })

	// Gone for good: the pool is closed; the sweeper keeps running.
	failed := logger.Count("sweep failed")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "more failed sweeps logged after the pool closed", func() bool { return logger.Count("sweep failed") >= failed+3 })
	if err := src.Close(context.Background()); err != nil {
		t.Logf("Close on a closed pool: %v", err) // nothing was queued: reported, not required
	}
}
