package sqlbench

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/berth-go/berth/transport/postgres"
)

// Counter counts what a set of connection pools sends to the database, at
// the driver: round trips on the wire and, on PostgreSQL, statements by
// kind. One Counter is shared by every pool of one strategy run, so the
// strategies are measured by the same code. On SQL Server it wraps
// go-mssqldb's connections (Connector.Dialer) for round trips and
// connections only: the statements are the engine's own counts there.
//
// A round trip is a client write that follows a server reply (or opens the
// connection). On PostgreSQL a statement sent as Parse/Bind/Execute/Sync in
// one flush is one round trip; an implicit prepare before it is another; a
// pgx liveness ping on a pooled connection, a transaction's BEGIN and
// COMMIT, the connection handshake and a cancel request all count.
// Notifications that arrive without a request (LISTEN) and the Terminate
// message that closes a connection do not. On SQL Server a request is one
// round trip however many TDS packets it takes; a transaction's begin and
// commit requests, the pre-login, TLS and login exchanges and an attention
// (cancel) all count.
//
// Statements are counted by a pgx query tracer: every Query and Exec,
// including BEGIN and COMMIT, each once, whatever the wire did for it. A
// statement that the classifier calls a receive (a claim, a polling SELECT)
// and that returned no rows counts as an empty claim. Peeks (SELECT count(*))
// always return a row; the peek consumer counts its empty peeks itself.
type Counter struct {
	roundTrips  atomic.Int64
	statements  atomic.Int64
	receives    atomic.Int64
	emptyClaims atomic.Int64
	conns       atomic.Int64

	// isReceive reports whether a statement is a receive attempt that
	// returns the rows it found.
	isReceive func(sql string) bool
}

// CounterSnapshot is a Counter's values at one time.
type CounterSnapshot struct {
	RoundTrips  int64 // wire round trips
	Statements  int64 // statements executed (tracer)
	Receives    int64 // receive statements (claims, polls)
	EmptyClaims int64 // receive statements that returned no row
	Conns       int64 // connections opened
}

// NewCounter returns a counter; isReceive classifies statements as receive
// attempts (nil: none are).
func NewCounter(isReceive func(sql string) bool) *Counter {
	if isReceive == nil {
		isReceive = func(string) bool { return false }
	}
	return &Counter{isReceive: isReceive}
}

// Snapshot returns the current counts.
func (c *Counter) Snapshot() CounterSnapshot {
	return CounterSnapshot{
		RoundTrips:  c.roundTrips.Load(),
		Statements:  c.statements.Load(),
		Receives:    c.receives.Load(),
		EmptyClaims: c.emptyClaims.Load(),
		Conns:       c.conns.Load(),
	}
}

type traceKey struct{}

// TraceQueryStart implements pgx.QueryTracer.
func (c *Counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	if c.isReceive(data.SQL) {
		c.receives.Add(1)
		return context.WithValue(ctx, traceKey{}, true)
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (c *Counter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if recv, _ := ctx.Value(traceKey{}).(bool); !recv || data.Err != nil {
		return
	}
	// UPDATE … RETURNING, DELETE … RETURNING and SELECT all report the
	// rows they returned.
	if data.CommandTag.RowsAffected() == 0 {
		c.emptyClaims.Add(1)
	}
}

// dial wraps a dial function (pgx's DialFunc, a go-mssqldb Dialer's
// DialContext) so that every connection counts its round trips.
func (c *Counter) dial(base dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := base(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c.conns.Add(1)
		cc := &countingConn{Conn: conn, rt: &c.roundTrips}
		cc.replied.Store(true) // the first write opens a round trip
		return cc, nil
	}
}

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// countingConn counts a round trip at each write that follows a read.
type countingConn struct {
	net.Conn
	rt      *atomic.Int64
	replied atomic.Bool // something was read since the last counted write
}

// terminate is the protocol's Terminate message, sent when a connection
// closes; it has no reply, so it is no round trip.
var terminate = []byte{'X', 0, 0, 0, 4}

func (c *countingConn) Write(p []byte) (int, error) {
	if len(p) > 0 && !bytes.Equal(p, terminate) && c.replied.Swap(false) {
		c.rt.Add(1)
	}
	return c.Conn.Write(p)
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.replied.Store(true)
	}
	return n, err
}

// PoolConfig describes one connection pool of a benchmark run.
type PoolConfig struct {
	// URL is the PostgreSQL URL (postgres://…).
	URL string
	// User, when set, replaces the URL's user.
	User string
	// Schema becomes the connections' search_path.
	Schema string
	// MaxConns bounds the pool (open and idle).
	MaxConns int
	// Counter, when set, counts the pool's round trips and statements.
	Counter *Counter
	// OnConnect, when set, receives each new connection's backend pid.
	OnConnect func(pid uint32)
}

// OpenPool opens a database/sql pool over pgx's stdlib driver, so that
// transports that need the pgx connection underneath (LISTEN) still get it.
// Connections are kept open (no idle timeout): a connection that closed
// would take its backend's CPU time out of the per-process accounting.
func OpenPool(pc PoolConfig) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(pc.URL)
	if err != nil {
		return nil, fmt.Errorf("sqlbench: parse URL: %w", err)
	}
	if pc.User != "" {
		cfg.User = pc.User
	}
	if pc.Schema != "" {
		cfg.RuntimeParams["search_path"] = pc.Schema
	}
	if pc.Counter != nil {
		cfg.Tracer = pc.Counter
		cfg.DialFunc = pc.Counter.dial(cfg.DialFunc) // fallback hosts share it
	}
	var opts []stdlib.OptionOpenDB
	if pc.OnConnect != nil {
		opts = append(opts, stdlib.OptionAfterConnect(func(_ context.Context, conn *pgx.Conn) error {
			pc.OnConnect(conn.PgConn().PID())
			return nil
		}))
	}
	// Berth's own pools are made this way (postgres.Open): a handler's
	// transaction commits with its settlement in one round trip.
	db := sql.OpenDB(postgres.Connector(stdlib.GetConnector(*cfg, opts...)))
	n := max(pc.MaxConns, 1)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return db, nil
}
