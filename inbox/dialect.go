package inbox

import (
	"strings"
	"time"
)

// statements are one dialect's SQL for the inbox table t.
type statements struct {
	create string
	// record inserts the key (arguments: key, now in Unix milliseconds
	// where the dialect keeps times in Go's clock); it affects no row when
	// the key is there.
	record string
	// prune deletes the keys handled before a cutoff (argument: the
	// retention in milliseconds, or the cutoff in Unix milliseconds).
	prune string
	// goClock: times are Unix milliseconds of the process's clock (SQLite),
	// not the server's.
	goClock bool
}

func statementsFor(dialect, t string) statements {
	switch dialect {
	case SQLite:
		return statements{
			create:  `CREATE TABLE IF NOT EXISTS ` + t + ` (message_key TEXT NOT NULL PRIMARY KEY, handled_at INTEGER NOT NULL)`,
			record:  `INSERT INTO ` + t + ` (message_key, handled_at) VALUES (?, ?) ON CONFLICT (message_key) DO NOTHING`,
			prune:   `DELETE FROM ` + t + ` WHERE handled_at < ?`,
			goClock: true,
		}
	case SQLServer:
		name := t
		if !strings.Contains(t, ".") {
			name = "dbo." + t
		}
		return statements{
			create: `IF OBJECT_ID(N'` + name + `', N'U') IS NULL CREATE TABLE ` + t + ` (message_key NVARCHAR(400) NOT NULL PRIMARY KEY, handled_at DATETIME2 NOT NULL DEFAULT SYSUTCDATETIME())`,
			// The key lock (UPDLOCK, HOLDLOCK) makes a concurrent duplicate
			// wait for this transaction, as a primary-key insert does on
			// PostgreSQL.
			record: `INSERT INTO ` + t + ` (message_key) SELECT @p1 WHERE NOT EXISTS (SELECT 1 FROM ` + t + ` WITH (UPDLOCK, HOLDLOCK) WHERE message_key = @p1)`,
			prune:  `DELETE FROM ` + t + ` WHERE handled_at < DATEADD(millisecond, -@p1, SYSUTCDATETIME())`,
		}
	}
	return statements{
		create: `CREATE TABLE IF NOT EXISTS ` + t + ` (message_key text NOT NULL PRIMARY KEY, handled_at timestamptz NOT NULL DEFAULT now())`,
		record: `INSERT INTO ` + t + ` (message_key) VALUES ($1) ON CONFLICT (message_key) DO NOTHING`,
		prune:  `DELETE FROM ` + t + ` WHERE handled_at < now() - $1 * interval '1 millisecond'`,
	}
}

// recordArgs are record's arguments for key.
func (s statements) recordArgs(key string, now time.Time) []any {
	if s.goClock {
		return []any{key, now.UnixMilli()}
	}
	return []any{key}
}

// pruneArgs are prune's arguments for retention.
func (s statements) pruneArgs(retention time.Duration, now time.Time) []any {
	if s.goClock {
		return []any{now.Add(-retention).UnixMilli()}
	}
	return []any{retention.Milliseconds()}
}
