package inbox

import (
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// Defaults of Config.
const (
	// DefaultTable is the inbox table's name.
	DefaultTable = "berth_inbox"
	// DefaultRetention is how long a key is kept: SQS's longest message
	// retention, so that no redelivery outlives its key.
	DefaultRetention = 14 * 24 * time.Hour
	// DefaultPruneInterval is how often old keys are deleted.
	DefaultPruneInterval = time.Hour
)

// Dialect names, for Config.Dialect.
const (
	Postgres  = "postgres"
	SQLite    = "sqlite"
	SQLServer = "sqlserver"
)

// Config configures an Inbox. The zero value, with DB set, is valid.
type Config struct {
	// DB is the database of the handler's effects, where the inbox table
	// lives. Required. On SQLite, pass the process's shared handle
	// (sqlite.Open): the handler's transaction holds its connection.
	DB *sql.DB

	// Dialect is Postgres, SQLite or SQLServer. Defaults to the one of
	// DB's driver (pgx, including postgres.Open's and postgres.Connector's
	// pools, or lib/pq; modernc.org/sqlite; go-mssqldb).
	Dialect string

	// Table is the inbox table, created if missing (optionally
	// schema-qualified: "app.inbox"). Defaults to DefaultTable.
	Table string

	// Key returns a message's key in the inbox. Defaults to the router
	// handler's name (message.HandlerNameFromCtx), a slash and the
	// message UUID. At most 400 characters.
	Key func(msg *message.Message) string

	// Retention is how long a key is kept after its message was handled.
	// Defaults to DefaultRetention (14 days).
	Retention time.Duration

	// PruneInterval is how often keys past Retention are deleted; negative
	// never (prune with Inbox.Prune). Defaults to DefaultPruneInterval.
	PruneInterval time.Duration

	// Logger receives prune failures. Defaults to none.
	Logger watermill.LoggerAdapter
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// Validate reports every invalid field, wrapped in transport.ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	if c.DB == nil {
		errs = append(errs, errors.New("DB: required"))
	}
	switch c.Dialect {
	case "", Postgres, SQLite, SQLServer:
	default:
		errs = append(errs, fmt.Errorf("Dialect: %q is not %s, %s or %s", c.Dialect, Postgres, SQLite, SQLServer))
	}
	if c.Table != "" && !tableName.MatchString(c.Table) {
		errs = append(errs, fmt.Errorf("Table: %q is not a table name ([schema.]name of letters, digits and _)", c.Table))
	}
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("Retention: %s is negative", c.Retention))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: inbox.Config: %w", transport.ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// withDefaults returns c with its defaults applied.
func (c Config) withDefaults() Config {
	if c.Dialect == "" {
		c.Dialect = dialectOf(c.DB)
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Key == nil {
		c.Key = DefaultKey
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.PruneInterval == 0 {
		c.PruneInterval = DefaultPruneInterval
	}
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
	return c
}

// DefaultKey is the default Config.Key: the router handler's name, a
// slash, and the message UUID.
func DefaultKey(msg *message.Message) string {
	return message.HandlerNameFromCtx(msg.Context()) + "/" + msg.UUID
}

// dialectOf names the dialect of db's driver, or "" when unknown.
func dialectOf(db *sql.DB) string {
	if db == nil {
		return ""
	}
	switch fmt.Sprintf("%T", db.Driver()) {
	case "*stdlib.Driver", "*pq.Driver",
		"postgres.inlineDriver": // postgres.Open's and postgres.Connector's pools
		return Postgres
	case "*sqlite.Driver":
		return SQLite
	case "*mssql.Driver":
		return SQLServer
	}
	return ""
}
