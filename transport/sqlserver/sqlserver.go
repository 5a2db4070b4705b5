package sqlserver

import (
	"database/sql"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	_ "github.com/microsoft/go-mssqldb" // registers the "sqlserver" database/sql driver
	"github.com/microsoft/go-mssqldb/azuread"
	"github.com/microsoft/go-mssqldb/msdsn"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// DefaultMaxOpenConns is the default size of a private pool opened with
// Open: enough for a claim, the group commits of Begin, Complete and Retry,
// a renewal and a sweep to run at once.
const DefaultMaxOpenConns = 8

// DefaultSharedMaxConns is the default size of the process-wide pool that
// every publisher and subscriber opened from the same DSN (or URL) shares.
const DefaultSharedMaxConns = 10

// pools are the process-wide pools, one per DSN.
var pools = &sqlqueue.SharedPools{Open: Open, Default: DefaultSharedMaxConns}

// SubscriberConfig configures a SQL Server subscriber: the engine's config
// (sqlqueue.SubscriberConfig), whose DSN is
// sqlserver://user:password@host:port?database=… or any go-mssqldb
// connection string (only the driver's own parameters belong in it). The
// zero value (with DSN or DB set) is the defaults.
type SubscriberConfig = sqlqueue.SubscriberConfig

// PublisherConfig configures a SQL Server publisher: the engine's config
// (sqlqueue.PublisherConfig). The zero value (with DSN or DB set) is the
// defaults.
type PublisherConfig = sqlqueue.PublisherConfig

// Open opens a private database/sql pool over go-mssqldb with at most
// maxConns connections (DefaultMaxOpenConns when ≤ 0). go-mssqldb parses
// the DSN here; it connects on first use. The caller closes it. To share
// one pool among many publishers and subscribers, set DSN in their configs
// instead (or open them by URL).
func Open(dsn string, maxConns int) (*sql.DB, error) {
	if maxConns <= 0 {
		maxConns = DefaultMaxOpenConns
	}
	db, err := openDriver(dsn)
	if err != nil {
		// go-mssqldb's parse errors never echo the password.
		return nil, fmt.Errorf("sqlserver: open: %w", err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// openDriver opens dsn with go-mssqldb, through its azuread package when
// the DSN asks for Microsoft Entra ID (Azure AD) authentication with a
// fedauth parameter (fedauth=ActiveDirectoryDefault,
// ActiveDirectoryManagedIdentity, ActiveDirectoryServicePrincipal, …, as
// go-mssqldb documents them), and with SQL or Windows authentication
// otherwise.
func openDriver(dsn string) (*sql.DB, error) {
	cfg, err := msdsn.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: DSN: %w", transport.ErrInvalidConfig, err)
	}
	if cfg.Parameters["fedauth"] == "" {
		return sql.Open("sqlserver", dsn)
	}
	c, err := azuread.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// NewSubscriber returns a subscriber on SQL Server. With cfg.DB nil it uses
// the process-wide pool of cfg.DSN (released on Close). The session is checked
// (Dialect.Check) and the tables created at the first Subscribe.
func NewSubscriber(cfg SubscriberConfig, logger watermill.LoggerAdapter) (*sqlqueue.Subscriber, error) {
	return sqlqueue.NewSubscriber(Dialect{}, cfg, logger)
}

// NewPublisher returns a publisher on SQL Server. With cfg.DB nil it uses
// the process-wide pool of cfg.DSN (released on Close). Subscribers in the same
// process are woken as soon as a Publish commits; others find the rows on
// their next claim.
func NewPublisher(cfg PublisherConfig, logger watermill.LoggerAdapter) (*sqlqueue.Publisher, error) {
	return sqlqueue.NewPublisher(Dialect{}, cfg, logger)
}

// SharedPool implements sqlqueue.PoolOpener: the process-wide pool of dsn.
func (Dialect) SharedPool(dsn string, maxConns int) (*sql.DB, io.Closer, error) {
	return pools.Get(dsn, maxConns)
}

// DDL returns the T-SQL script creating the shared tables at the latest
// version and the queue table of each (topic, consumer group) pair in
// queues, for DBAs who apply schema by hand (then set Tables.ManualSchema,
// URL manual_schema=true). It holds exactly the statements the transport
// runs when it creates the schema itself, each batch ended by GO, as
// sqlcmd and SSMS expect. Subscriptions are rows, not schema: subscribers
// record theirs at run time.
func DDL(t sqlqueue.Tables, queues ...sqlqueue.QueueRef) string {
	d := Dialect{}
	n := sqlqueue.NamesFor(d, t)
	var b strings.Builder
	write := func(sts ...sqlqueue.Stmt) {
		for _, st := range sts {
			b.WriteString(st.SQL)
			b.WriteString("\nGO\n\n")
		}
	}
	b.WriteString("-- Berth SQL queue schema (sqlserver dialect); GO ends each batch (sqlcmd, SSMS)\n\n")
	// Filtered indexes need these (sqlcmd starts with QUOTED_IDENTIFIER
	// OFF); go-mssqldb sessions have them already (Dialect.Check).
	b.WriteString("SET ANSI_NULLS, ANSI_PADDING, ANSI_WARNINGS, ARITHABORT, CONCAT_NULL_YIELDS_NULL, QUOTED_IDENTIFIER ON;\nSET NUMERIC_ROUNDABORT OFF;\nGO\n\n")
	write(d.VersionTable(n)...)
	ms := d.Migrations(n)
	for _, m := range ms {
		fmt.Fprintf(&b, "-- version %d\n", m.Version)
		write(m.Stmts...)
	}
	if len(ms) > 0 {
		write(d.SetSchemaVersion(n, ms[len(ms)-1].Version))
	}
	for _, tg := range queues {
		fmt.Fprintf(&b, "-- queue of topic %q, consumer group %q\n", tg.Topic, tg.ConsumerGroup)
		write(d.CreateQueue(sqlqueue.QueueFor(d, t, tg.Topic, tg.ConsumerGroup))...)
	}
	return b.String()
}
