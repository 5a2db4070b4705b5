package sqlbench

import (
	"context"
	"database/sql"
)

// database is the server the runs of one scenario share (PostgreSQL or SQL
// Server): which strategies run there, and how each run gets a fresh
// schema, its pools and its server-side measurements. The run itself
// (publishing, instances, tracking, the driver's counts) is the same code
// on every database (harness.Run).
type database interface {
	// name names the database in progress and notes: "postgres",
	// "sqlserver".
	name() string
	// resultDatabase is bench.Result.Database for runs on it: "" on
	// PostgreSQL, whose results keep the form they had before other
	// databases could run.
	resultDatabase() string
	// strategies lists the strategies that run on it, in order.
	strategies() []string
	// tracesStatements reports whether the driver counts statements
	// (CounterSnapshot.Statements, Receives, EmptyClaims); when it does not,
	// the engine's own counts (sqlqueue.Stats) are used.
	tracesStatements() bool
	// newRun creates a fresh schema for one run.
	newRun(ctx context.Context) (dbRun, error)
	// notes are remarks for every result on it (what it cannot measure).
	notes() []string
	close() error
}

// dbRun is one run's corner of a database: its schema, its pools and what
// the server measures. Run calls, in order: strategy and publisherPool; then,
// once the backlog is published, begin (the measured window starts),
// instancePool for each instance and midWindow; after the last ack, lastAck
// (the instances are still open); after they have closed, end; finally
// drop, whatever happened.
// An analyzer is a dbRun whose planner needs statistics gathered: a drain
// then starts on tables analyzed once its backlog is in (analyze), as
// autovacuum leaves the tables of a service, for every strategy alike.
// Without it every drain ran on tables never analyzed, whose plans come
// from guesses: on PostgreSQL a claim of 64 rows then sorted the whole
// backlog (20–180 ms instead of ~2), the first minute of a new table, not
// a drain (docs/benchmarks.md, "A table with statistics").
type analyzer interface {
	analyze(ctx context.Context) error
}

type dbRun interface {
	// strategy returns the named strategy, bound to this run's schema.
	strategy(name string) (strategy, error)
	// publisherPool opens the pool of the strategy's set-up and publisher,
	// whose work on the server is left out of the measurements where the
	// database can tell it apart.
	publisherPool() (*sql.DB, error)
	// instancePool opens one subscriber instance's pool of maxConns
	// connections, counted by ctr.
	instancePool(maxConns int, ctr *Counter) (*sql.DB, error)
	// begin starts the server-side measurements.
	begin(ctx context.Context) error
	// midWindow measures the server's CPU between the lo-th and the hi-th
	// processed message of tr; nil when the database cannot.
	midWindow(ctx context.Context, tr *tracker, lo, hi int) *midWindow
	// lastAck is called after the last ack, before the instances close.
	lastAck(ctx context.Context) error
	// end ends the measurements once the instances have closed, adding its
	// metrics to m (per divides by the messages processed), and returns
	// notes on them.
	end(ctx context.Context, m map[string]float64, per func(float64) float64) ([]string, error)
	// drop removes the run's schema and everything in it.
	drop(ctx context.Context) error
}
