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

// The handler's transaction (transport.TxFromContext) is BEGIN, the
// handler's statements, its settlement (a fenced DELETE of its row), and
// COMMIT: four round trips through database/sql, which sends each
// statement and waits for it. On the connections of the pools this
// package opens (Open, the shared pools of a DSN or URL, and any pool over
// Connector), two of them ride on others:
//
//   - BEGIN is sent in one pipeline with the transaction's first
//     statement, when that is an Exec (a query, a prepared statement, or
//     an Exec given pgx's QueryExecMode sends it first, on its own);
//   - the settlement is sent with the COMMIT. It cannot then be checked
//     between the two, so it fails when its row is no longer the lease's
//     (CompleteCommit), and the failure stops the pipeline before the
//     COMMIT: the transaction is rolled back, and the handler is told
//     ErrLeaseLost, as before.
//
// A handler that writes with one Exec costs two round trips.

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
// (stdlib.GetConnector), so that a transaction on the pool sends its
// BEGIN with its first Exec, and a handler's transaction commits with its
// settlement in one round trip instead of two. The pools
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

// inlineConn is a pgx connection that sends a transaction's BEGIN with
// its first statement, and a settlement marked with commitMarker
// together with COMMIT. Everything else is pgx's (the embedded
// connection's methods: database/sql's optional interfaces). database/sql
// uses a connection from one goroutine at a time.
type inlineConn struct {
	*stdConn
	// begin: this connection's transaction has begun, and its BEGIN is not
	// sent yet. It goes with the first statement (ExecContext), or before it
	// (QueryContext, PrepareContext, Conn).
	begin bool
	// committed: the transaction of this connection was committed by
	// execBatch, so its Commit (or Rollback) sends nothing.
	committed bool
}

// stdConn is pgx's connection, embedded in inlineConn under this name so
// that its Conn method can be overridden and still be reached.
type stdConn = stdlib.Conn

// pgxConn is implemented by pgx's database/sql connections, and by
// inlineConn.
type pgxConn interface{ Conn() *pgx.Conn }

// Conn returns the pgx connection, for database/sql's Conn.Raw. A BEGIN
// that waits for its transaction's first statement is sent first, so
// that what the caller runs on it runs in the transaction; if it cannot
// be, the connection is closed, and the caller's statements fail.
func (c *inlineConn) Conn() *pgx.Conn {
	pc := c.stdConn.Conn()
	if err := c.sendBegin(context.Background()); err != nil {
		_ = pc.Close(context.Background())
	}
	return pc
}

func (c *inlineConn) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	c.committed = false
	if opts.Isolation != 0 || opts.ReadOnly { // pgx's BEGIN, with its options
		t, err := c.stdConn.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		return &inlineTx{eager: t, c: c, ctx: ctx}, nil
	}
	if c.stdConn.Conn().IsClosed() {
		return nil, sqldriver.ErrBadConn
	}
	c.begin = true
	return &inlineTx{c: c, ctx: ctx}, nil
}

// sendBegin sends the BEGIN that waits for the transaction's first
// statement, if one does.
func (c *inlineConn) sendBegin(ctx context.Context) error {
	if !c.begin {
		return nil
	}
	c.begin = false
	_, err := c.stdConn.Conn().Exec(ctx, "begin")
	return err
}

func (c *inlineConn) ExecContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	commit := strings.HasPrefix(query, commitMarker)
	switch {
	case commit:
	case !c.begin:
		return c.stdConn.ExecContext(ctx, query, args)
	case len(args) > 0 && isExecMode(args[0].Value):
		// pgx's option of one statement, which a pipeline does not take.
		if err := c.sendBegin(ctx); err != nil {
			return nil, err
		}
		return c.stdConn.ExecContext(ctx, query, args)
	}
	return c.execBatch(ctx, query, args, commit)
}

func isExecMode(v any) bool {
	_, ok := v.(pgx.QueryExecMode)
	return ok
}

func (c *inlineConn) QueryContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	if err := c.sendBegin(ctx); err != nil {
		return nil, err
	}
	return c.stdConn.QueryContext(ctx, query, args)
}

// PrepareContext sends a waiting BEGIN first: the statement's executions
// go through pgx's connection, not this one.
func (c *inlineConn) PrepareContext(ctx context.Context, query string) (sqldriver.Stmt, error) {
	if err := c.sendBegin(ctx); err != nil {
		return nil, err
	}
	return c.stdConn.PrepareContext(ctx, query)
}

// execBatch sends query in one pipeline with the transaction's BEGIN, if
// it waits, and with COMMIT, if commit. An error stops the pipeline
// before the statements after it (the transaction is then aborted, and
// its Rollback ends it).
func (c *inlineConn) execBatch(ctx context.Context, query string, args []sqldriver.NamedValue, commit bool) (sqldriver.Result, error) {
	pc := c.stdConn.Conn()
	if pc.IsClosed() {
		return nil, sqldriver.ErrBadConn
	}
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	var b pgx.Batch
	begin := c.begin
	if begin {
		b.Queue("begin")
		c.begin = false
	}
	b.Queue(query, vals...)
	if commit {
		b.Queue("commit")
	}
	br := pc.SendBatch(ctx, &b)
	var tag, ctag pgconn.CommandTag
	var err error
	if begin {
		_, err = br.Exec()
	}
	if err == nil {
		tag, err = br.Exec()
	}
	ran := err == nil // the statement ran: a failure after it is the COMMIT's
	if ran && commit {
		ctag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil && (!ran || !commit):
		if begin {
			c.abort(ctx)
		}
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("commit: %w", err)
	case commit && ctag.String() == "ROLLBACK": // the transaction had failed before
		return nil, fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback)
	}
	if commit {
		c.committed = true
	}
	return sqldriver.RowsAffected(tag.RowsAffected()), nil
}

// abortText is what a transaction casts to int to abort itself (abort).
const abortText = "berth: the first statement of the transaction failed"

// abort leaves the transaction aborted after its first statement failed,
// as it is on a pgx connection that sent BEGIN on its own: its later
// statements fail, and its Commit rolls back. The statement can fail
// before the pipeline is sent (pgx prepares it first), and then BEGIN
// was not sent either; a connection that cannot be brought there is
// closed.
func (c *inlineConn) abort(ctx context.Context) {
	pc := c.stdConn.Conn()
	if pc.IsClosed() || pc.PgConn().TxStatus() != 'I' {
		return // closed, or the BEGIN ran and the failure aborted it
	}
	if ctx.Err() == nil {
		_, _ = pc.PgConn().Exec(ctx, "begin; select '"+abortText+"'::int").ReadAll()
		if pc.PgConn().TxStatus() == 'E' {
			return
		}
	}
	_ = pc.Close(context.Background())
}

// inlineTx is a transaction of inlineConn's: pgx's (eager), when it was
// begun with options, or else the one whose BEGIN the connection sends
// with its first statement. Its Commit sends nothing once execBatch has
// committed it, or when no statement ran in it.
type inlineTx struct {
	eager sqldriver.Tx
	c     *inlineConn
	ctx   context.Context // BeginTx's, as pgx's transactions use it
}

func (t *inlineTx) Commit() error {
	c := t.c
	switch {
	case c.committed:
		c.committed = false
		return nil
	case c.begin: // no statement: nothing to commit
		c.begin = false
		return nil
	case t.eager != nil:
		return t.eager.Commit()
	}
	// As pgx's transaction commits.
	pc := c.stdConn.Conn()
	tag, err := pc.Exec(t.ctx, "commit")
	if err != nil {
		if pc.PgConn().TxStatus() != 'I' {
			_ = pc.Close(t.ctx)
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

func (t *inlineTx) Rollback() error {
	c := t.c
	switch {
	case c.committed:
		c.committed = false
		return nil
	case c.begin:
		c.begin = false
		return nil
	case t.eager != nil:
		return t.eager.Rollback()
	}
	// As pgx's transaction rolls back: a failed rollback leaves the
	// connection in a state it cannot be used in.
	pc := c.stdConn.Conn()
	if _, err := pc.Exec(t.ctx, "rollback"); err != nil {
		_ = pc.Close(t.ctx)
		return err
	}
	return nil
}

// LeaseLost implements sqlqueue.SettleCommitter: err is CompleteCommit's
// failure for a row that is no longer the lease's.
func (Dialect) LeaseLost(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22P02" && strings.Contains(pe.Message, leaseLostText)
}
