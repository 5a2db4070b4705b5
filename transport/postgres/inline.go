package postgres

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// The handler's transaction (transport.TxFromContext) ends with its
// settlement, a fenced DELETE of its row, then COMMIT: two round trips
// through database/sql, which sends each statement and waits for it. On
// the connections of the pools this package opens (Open, the shared
// pools of a DSN or URL, and any pool over Connector), the settlement is
// sent with the COMMIT in one pipeline: one round trip. The settlement
// cannot then be checked between the two, so it fails when its row is no
// longer the lease's (CompleteCommit), and the failure stops the
// pipeline before the COMMIT: the transaction is rolled back, and the
// handler is told ErrLeaseLost, as before.

// commitMarker opens the settlement statement that a connection of
// Connector's sends together with COMMIT. It is a comment, so any other
// connection runs the statement as it is, and the engine's Commit after
// it commits.
const commitMarker = "/* berth: settle, then commit */\n"

// leaseLostText is what the settlement casts to int when its row is no
// longer the lease's: the cast fails with SQLSTATE 22P02 and a message
// that quotes it (LeaseLost).
const leaseLostText = "berth: lease lost"

// Connector wraps c, a connector of pgx's database/sql driver
// (stdlib.GetConnector), so that a handler's transaction on the pool
// commits with its settlement in one round trip instead of two. The pools
// Open and the shared pools open are made this way; use Connector for a
// pool of your own (a custom dialer, tracer or BeforeConnect) that you
// pass as a subscriber's DB:
//
//	db := sql.OpenDB(postgres.Connector(stdlib.GetConnector(*cfg)))
//
// Any other statement runs as on c's connections. Connections of another
// driver are used as they are, without the single round trip.
func Connector(c sqldriver.Connector) sqldriver.Connector { return connector{c} }

type connector struct{ inner sqldriver.Connector }

func (c connector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return wrapConn(dc), nil
}

func (c connector) Driver() sqldriver.Driver { return inlineDriver{c.inner.Driver()} }

// inlineDriver is the driver of a Connector's pool (sql.DB.Driver).
type inlineDriver struct{ sqldriver.Driver }

func (d inlineDriver) Open(name string) (sqldriver.Conn, error) {
	dc, err := d.Driver.Open(name)
	if err != nil {
		return nil, err
	}
	return wrapConn(dc), nil
}

func wrapConn(dc sqldriver.Conn) sqldriver.Conn {
	if sc, ok := dc.(*stdlib.Conn); ok {
		return &inlineConn{stdConn: sc}
	}
	return dc
}

// inlineConn is a pgx connection that sends a settlement marked with
// commitMarker together with COMMIT. Everything else is pgx's (the
// embedded connection's methods: database/sql's optional interfaces).
// database/sql uses a connection from one goroutine at a time.
type inlineConn struct {
	*stdConn
	// committed: the transaction of this connection was committed by
	// execCommit, so its Commit (or Rollback) sends nothing.
	committed bool
}

// stdConn is pgx's connection, embedded in inlineConn under this name so
// that its Conn method (pgxConn) is promoted, which a field named Conn
// would hide.
type stdConn = stdlib.Conn

// pgxConn is implemented by pgx's database/sql connections, and by
// inlineConn through them.
type pgxConn interface{ Conn() *pgx.Conn }

func (c *inlineConn) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	t, err := c.stdConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.committed = false
	return &inlineTx{Tx: t, c: c}, nil
}

func (c *inlineConn) ExecContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	if !strings.HasPrefix(query, commitMarker) {
		return c.stdConn.ExecContext(ctx, query, args)
	}
	return c.execCommit(ctx, query, args)
}

// execCommit sends query and COMMIT in one pipeline. An error of query's
// stops the pipeline before COMMIT (the transaction is then aborted, and
// its Rollback ends it).
func (c *inlineConn) execCommit(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	pc := c.Conn()
	if pc.IsClosed() {
		return nil, sqldriver.ErrBadConn
	}
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	var b pgx.Batch
	b.Queue(query, vals...)
	b.Queue("commit")
	br := pc.SendBatch(ctx, &b)
	tag, err := br.Exec()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	ctag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("commit: %w", err)
	case ctag.String() == "ROLLBACK": // the transaction had failed before
		return nil, fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback)
	}
	c.committed = true
	return sqldriver.RowsAffected(tag.RowsAffected()), nil
}

// inlineTx is pgx's transaction, whose Commit sends nothing once
// execCommit has committed it.
type inlineTx struct {
	sqldriver.Tx
	c *inlineConn
}

func (t *inlineTx) Commit() error {
	if t.c.committed {
		t.c.committed = false
		return nil
	}
	return t.Tx.Commit()
}

func (t *inlineTx) Rollback() error {
	if t.c.committed {
		t.c.committed = false
		return nil
	}
	return t.Tx.Rollback()
}

// LeaseLost implements sqlqueue.SettleCommitter: err is CompleteCommit's
// failure for a row that is no longer the lease's.
func (Dialect) LeaseLost(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22P02" && strings.Contains(pe.Message, leaseLostText)
}
