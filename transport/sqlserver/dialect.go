package sqlserver

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// Limits of the T-SQL dialect.
const (
	// MaxParams is the most parameters one statement binds. SQL Server
	// accepts 2,100 per RPC request, and go-mssqldb sends a parameterised
	// statement as sp_executesql, whose own @stmt and @params take two of
	// them.
	MaxParams = 2100 - 2
	// MaxRowsPerInsert is how many rows one INSERT carries. The rows travel
	// as one JSON document in one nvarchar(max) parameter, so the bound is
	// not the parameter limit but the size of one statement: a publish of
	// more rows is split into several statements in one transaction.
	MaxRowsPerInsert = 1000
	// MaxDuration is the longest delay, time-to-live, lease or fetch
	// timeout the dialect encodes; longer ones are clamped to it. DATEADD
	// takes an int, so durations travel as whole milliseconds (bigint) and
	// are added as seconds plus milliseconds; ten years of seconds fits an
	// int with room to spare, and now + ten years stays far inside
	// datetime2's range.
	MaxDuration = 10 * 365 * 24 * time.Hour
	// MinCompatibilityLevel is the lowest database compatibility level the
	// dialect runs on: OPENJSON needs 130 (SQL Server 2016).
	MinCompatibilityLevel = 130
	// maxLockKey is sp_getapplock's @Resource length (nvarchar(255)).
	maxLockKey = 255
	// MaxInsertBytes bounds the JSON document of one INSERT statement,
	// in bytes (UTF-8, as Go builds it; twice that crosses the wire as
	// nvarchar, UTF-16): an Insert of rows whose documents add up to more
	// is split into several statements, each of at least one row, however
	// large. A body is about 1.33 bytes of JSON per byte (base64), so a
	// statement carries about 3 MB of bodies: a publish of many large
	// messages neither nears nvarchar(max)'s 2 GB nor holds more than a
	// few MB per statement in the client and the server, and
	// MaxRowsPerInsert still bounds a statement of small rows.
	MaxInsertBytes = 4 << 20
	// MaxMessageSize is the largest PublisherConfig.MaxMessageSize on SQL
	// Server, in bytes of metadata (as JSON) and payload: 16 MiB. A
	// message travels in one INSERT (its row is never split), as about
	// 2.67 bytes on the wire per body byte (base64 in UTF-16): 45 MB at
	// this size, and the client holds about 14 bytes per body byte while
	// it builds and encodes the statement (BenchmarkInsertEncoding), some
	// 235 MB. A larger setting fails the constructor with
	// transport.ErrInvalidConfig naming this limit.
	MaxMessageSize = 16 << 20
)

// Column limits, in UTF-16 code units as nvarchar(n) counts them. The
// engine checks them in Go (Dialect.Limits).
const (
	// MaxUUIDLength is the longest message UUID (uuid nvarchar(255)).
	MaxUUIDLength = 255
	// MaxTopicLength is the longest topic (topic nvarchar(255)).
	MaxTopicLength = 255
	// MaxConsumerGroupLength is the longest consumer group
	// (consumer_group nvarchar(128)).
	MaxConsumerGroupLength = 128
	// MaxOrderingKeyLength is the longest ordering key (ordering_key
	// nvarchar(255), see transport.MetadataOrderingKey).
	MaxOrderingKeyLength = 255
)

// Dialect is the SQL Server (T-SQL) dialect: every statement of the
// transport on SQL Server is in this file. It implements
// sqlqueue.Dialect, sqlqueue.SessionChecker,
// sqlqueue.MissingTableClassifier, sqlqueue.DirectDialect (claims straight
// into processing), sqlqueue.AckRider (acks carried by claims) and
// sqlqueue.KeyClaimer (the hand-off of a settled key's next row), not
// sqlqueue.HeadPromoter (its queue tables have no waiting marker). The
// zero value is ready to use.
//
// # Plan reuse
//
// Statements with arguments reach the server through sp_executesql with
// positional parameters @p1, @p2, … (go-mssqldb names the i-th argument
// @p<i>). SQL Server keys a cached plan on the statement text and on the
// parameter declaration list, and go-mssqldb declares a Go string as
// nvarchar(<its length>) and a []byte as varbinary(<its length>): a plan
// per length. So every argument here has a declaration that does not
// depend on its value: integers are int64 (bigint), strings are
// mssql.NVarCharMax (nvarchar(max)), and no statement binds a []byte —
// Insert sends its rows, bodies base64-encoded, as one nvarchar(max) JSON
// document that OPENJSON … WITH (body varbinary(max)) decodes. Each
// statement's text is constant too (ids travel as JSON, never as a
// variable-length list), so each has one plan.
type Dialect struct{}

var (
	_ sqlqueue.Dialect                = Dialect{}
	_ sqlqueue.SessionChecker         = Dialect{}
	_ sqlqueue.MissingTableClassifier = Dialect{}
	_ sqlqueue.Limiter                = Dialect{}
	_ sqlqueue.MultiProber            = Dialect{}
	_ sqlqueue.QueueMigrator          = Dialect{}
	_ sqlqueue.CallerTxDialect        = Dialect{}
	_ sqlqueue.SweepSplitter          = Dialect{}
	_ sqlqueue.DirectDialect          = Dialect{}
	_ sqlqueue.AckRider               = Dialect{}
	_ sqlqueue.KeyClaimer             = Dialect{}
)

// nv declares s as nvarchar(max), whatever its length (see Plan reuse).
func nv(s string) mssql.NVarCharMax { return mssql.NVarCharMax(s) }

func st(sql string, args ...any) sqlqueue.Stmt { return sqlqueue.Stmt{SQL: sql, Args: args} }

// Name implements sqlqueue.Dialect.
func (Dialect) Name() string { return "sqlserver" }

// MessagingSystem is the messaging.system that package telemetry reports
// for SQL Server queue tables (sqlqueue.MessagingSystem of this dialect): the
// OpenTelemetry conventions define no value for them.
const MessagingSystem = "berth.sqlserver"

// QuoteIdent implements sqlqueue.Dialect: a delimited identifier, as
// QUOTENAME writes it ("]" doubled).
func (Dialect) QuoteIdent(name string) string {
	return "[" + strings.ReplaceAll(name, "]", "]]") + "]"
}

// literal returns s as a T-SQL Unicode string literal (quotes doubled).
func literal(s string) string { return "N'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ms encodes d as whole milliseconds (rounded up), clamped to
// [0, MaxDuration].
func ms(d time.Duration) int64 { return sqlqueue.Millis(min(d, MaxDuration)) }

// after is the datetime2 "now + p milliseconds", p a bigint expression of
// at most MaxDuration: DATEADD takes an int, so p is split into seconds
// and the remaining milliseconds.
func after(p string) string {
	return "DATEADD(millisecond, CAST(" + p + " % 1000 AS int), DATEADD(second, CAST(" + p + " / 1000 AS int), @now))"
}

// The head of every batch: no row-count messages, and one consistent
// "now" (the server's UTC clock, at the columns' precision).
//
// # Isolation
//
// Every batch that reads or writes a queue table's rows on Berth's own
// account — claims, the idle probe, settlements, sweeps, inserts of
// Publish, the parked messages' pruning — sets READ COMMITTED at its head
// (headRC, headLocking). On-premises SQL Server does not reset the
// isolation level of a pooled connection (sp_reset_connection leaves it),
// so a caller's *sql.DB once used at SERIALIZABLE would run a Complete or
// an Insert at SERIALIZABLE: key-range locks held to the statement's end
// and on to the transaction's, where READPAST and the claim's locking
// assume READ COMMITTED. The setting is scoped to the sp_executesql call:
// the session's own level is back when the batch ends (MultiProbe, which
// takes no argument, goes as a plain batch and leaves the session at READ
// COMMITTED).
//
// The statements that run inside a caller's transaction — Publisher.WithTx
// (PublishInTx) and the handler's transaction that CompleteTx commits
// (InsertInTx, CompleteInTx, see sqlqueue.CallerTxDialect) — do not set
// it: the caller chose the transaction's level, and a statement of theirs
// should run at it. Nor do the schema, subscription and fleet batches,
// which are guarded by application locks and explicit hints rather than
// by the level, and of which some (Subscriptions, Register, CopyParked)
// also run inside a caller's transaction.
const (
	head        = "SET NOCOUNT ON;\n"
	headNow     = head + "DECLARE @now datetime2(3) = SYSUTCDATETIME();\n"
	headRC      = head + "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n"
	headLocking = headRC + "DECLARE @now datetime2(3) = SYSUTCDATETIME();\n"
)

// Limits implements sqlqueue.Limiter: the nvarchar columns' lengths, in
// UTF-16 code units, and MaxMessageSize.
func (Dialect) Limits() sqlqueue.Limits {
	return sqlqueue.Limits{UUID: MaxUUIDLength, Topic: MaxTopicLength, ConsumerGroup: MaxConsumerGroupLength,
		OrderingKey: MaxOrderingKeyLength, MessageSize: MaxMessageSize, Length: utf16Len}
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r >= 0x10000 {
			n++ // a surrogate pair
		}
	}
	return n
}

// LockTimeout is the longest Lock (with wait) and SharedLock wait for
// their application lock — the schema lock, held while a queue table is
// created or upgraded, and a topic's lock, held while a consumer group
// registers — before they fail with error LockTimeoutError. Without a
// bound, a Publish or Subscribe that needs the lock while an upgrade runs
// elsewhere would wait for as long as the upgrade, with no deadline of its
// own.
const LockTimeout = time.Minute

// LockTimeoutError is the number of the error (an mssql.Error) that Lock
// and SharedLock raise when their application lock is not granted within
// LockTimeout (sp_getapplock timed out, was chosen as a deadlock victim, or
// failed). See IsLockTimeout.
const LockTimeoutError = 51222

// IsLockTimeout reports whether err is (or wraps) LockTimeoutError: an
// application lock (the schema lock, a topic lock) that another session
// held for longer than LockTimeout. It is not transient: the statement's
// caller (Subscribe, Publish) returns it.
func IsLockTimeout(err error) bool {
	var e mssql.Error
	return errors.As(err, &e) && e.Number == LockTimeoutError
}

// lockHead computes the application lock's resource from @p1; lockWait
// takes it in mode, waiting at most LockTimeout, and raises
// LockTimeoutError when it is not granted.
const lockHead = head + `DECLARE @r int, @k nvarchar(max) = N'berth:' + SCHEMA_NAME() + N':' + @p1;
IF DATALENGTH(@k) / 2 > 255 SET @k = LEFT(@k, 222) + N':' + CONVERT(nvarchar(32), CAST(HASHBYTES('SHA2_256', @k) AS binary(16)), 2);
DECLARE @res nvarchar(255) = @k;
`

func lockWait(mode string) string {
	timeout := strconv.FormatInt(LockTimeout.Milliseconds(), 10)
	return lockHead + `EXEC @r = sp_getapplock @Resource = @res, @LockMode = '` + mode + `', @LockOwner = 'Transaction', @LockTimeout = ` + timeout + `;
IF @r < 0
BEGIN
	DECLARE @m nvarchar(2048) = N'berth: application lock ' + @res + N' not granted within ` + timeout + ` ms (sp_getapplock returned ' + CAST(@r AS nvarchar(11)) + N'; -1 is a timeout): another session holds it, a schema upgrade or a consumer group registering';
	THROW ` + strconv.Itoa(LockTimeoutError) + `, @m, 1;
END;
SELECT CASE WHEN @r >= 0 THEN 1 ELSE 0 END;`
}

// Lock implements sqlqueue.Dialect with sp_getapplock owned by the
// transaction: released at commit or rollback. App locks are per
// database, so the resource names the effective schema (SCHEMA_NAME(), the
// user's default schema when the tables are unqualified), as PostgreSQL's
// names current_schema(): two deployments in different default schemas do
// not share locks. Resources longer than sp_getapplock's 255 characters
// keep their first 222 and end with ":" and 32 hex digits of their
// SHA-256. With wait, the wait is bounded by LockTimeout, after which the
// statement raises LockTimeoutError (IsLockTimeout); without, it answers 0
// at once when the lock is held.
func (Dialect) Lock(key string, wait bool) sqlqueue.Stmt {
	if wait {
		return st(lockWait("Exclusive"), nv(key))
	}
	return st(lockHead+`EXEC @r = sp_getapplock @Resource = @res, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = 0;
SELECT CASE WHEN @r >= 0 THEN 1 ELSE 0 END;`, nv(key))
}

// VersionTable implements sqlqueue.Dialect. With a schema set it also
// creates the schema (CREATE SCHEMA must be alone in its batch, hence
// EXEC).
func (d Dialect) VersionTable(n sqlqueue.Names) []sqlqueue.Stmt {
	var out []sqlqueue.Stmt
	if n.Schema != "" {
		out = append(out, st(head+`IF SCHEMA_ID(`+literal(n.Schema)+`) IS NULL
	EXEC(`+literal("CREATE SCHEMA "+d.QuoteIdent(n.Schema))+`)`))
	}
	return append(out, st(head+`IF OBJECT_ID(`+literal(n.Version)+`, N'U') IS NULL
CREATE TABLE `+n.Version+` (
	version    int          NOT NULL PRIMARY KEY,
	applied_at datetime2(3) NOT NULL DEFAULT SYSUTCDATETIME()
)`))
}

// SchemaVersion implements sqlqueue.Dialect.
func (Dialect) SchemaVersion(n sqlqueue.Names) sqlqueue.Stmt {
	return st(head + `SELECT COALESCE(MAX(version), 0) FROM ` + n.Version + `;`)
}

// SetSchemaVersion implements sqlqueue.Dialect. The version is a literal so
// the printed DDL runs as is.
func (Dialect) SetSchemaVersion(n sqlqueue.Names, v int) sqlqueue.Stmt {
	s := strconv.Itoa(v)
	return st(head + `IF NOT EXISTS (SELECT 1 FROM ` + n.Version + ` WHERE version = ` + s + `)
INSERT INTO ` + n.Version + ` (version) VALUES (` + s + `)`)
}

// Migrations implements sqlqueue.Dialect. Topic and consumer group
// compare with a binary collation, so "Orders" and "orders" are two topics
// whatever the database's collation.
func (d Dialect) Migrations(n sqlqueue.Names) []sqlqueue.Migration {
	errIdx := n.ErrorsName + "_queue"
	return []sqlqueue.Migration{{Version: 1, Stmts: []sqlqueue.Stmt{
		st(head + `IF OBJECT_ID(` + literal(n.Subscriptions) + `, N'U') IS NULL
CREATE TABLE ` + n.Subscriptions + ` (
	topic          nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
	consumer_group nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
	queue_table    nvarchar(128) NOT NULL,
	created_at     datetime2(3)  NOT NULL DEFAULT SYSUTCDATETIME(),
	PRIMARY KEY (topic, consumer_group)
)`),
		st(head + `IF OBJECT_ID(` + literal(n.Errors) + `, N'U') IS NULL
CREATE TABLE ` + n.Errors + ` (
	id           bigint IDENTITY(1, 1) NOT NULL PRIMARY KEY,
	queue_table  nvarchar(128)  NOT NULL,
	message_uuid nvarchar(255)  NOT NULL,
	headers      nvarchar(max)  NOT NULL,
	body         varbinary(max) NOT NULL,
	attempts     int            NOT NULL,
	reason       nvarchar(max)  NOT NULL,
	original_id  bigint         NOT NULL,
	created_at   datetime2(3)   NOT NULL,
	failed_at    datetime2(3)   NOT NULL DEFAULT SYSUTCDATETIME()
)`),
		st(head + `IF INDEXPROPERTY(OBJECT_ID(` + literal(n.Errors) + `), ` + literal(errIdx) + `, 'IndexID') IS NULL
CREATE INDEX ` + d.QuoteIdent(errIdx) + ` ON ` + n.Errors + ` (queue_table, failed_at)`),
	}}, {Version: 2, Stmts: []sqlqueue.Stmt{
		// Queue tables made by version 1 get the expiry index, the lease
		// index with state included, and OPTIMIZE_FOR_SEQUENTIAL_KEY
		// (upgradeQueue). Every subscribed queue table is visited; one
		// created by a publisher alone is upgraded by CreateQueue at its
		// next use.
		d.upgradeQueues(n),
	}}, {Version: 3, Stmts: []sqlqueue.Stmt{
		// Version 3 adds the ordering key column and its two indexes
		// (upgradeQueue again: it does only what a table lacks).
		d.upgradeQueues(n),
	}}, {Version: 4, Stmts: []sqlqueue.Stmt{
		// Version 4 disables lock escalation on every queue table
		// (noEscalation; upgradeQueue again).
		d.upgradeQueues(n),
	}}}
}

// upgradeQueues runs upgradeQueue on every subscribed queue table.
func (d Dialect) upgradeQueues(n sqlqueue.Names) sqlqueue.Stmt {
	return st(upgradeHead + `DECLARE @name nvarchar(128), @t nvarchar(300), @sql nvarchar(max), @online nvarchar(200);
DECLARE @done TABLE (name nvarchar(128) NOT NULL PRIMARY KEY);
WHILE 1 = 1
BEGIN
	SET @name = NULL;
	SELECT TOP (1) @name = s.queue_table FROM ` + n.Subscriptions + ` AS s
	WHERE NOT EXISTS (SELECT 1 FROM @done AS d WHERE d.name = s.queue_table)
	ORDER BY s.queue_table;
	IF @name IS NULL BREAK;
	INSERT INTO @done (name) VALUES (@name);
	SET @t = ` + schemaPrefix(d, n.Schema) + `QUOTENAME(@name);
` + upgradeQueue + `END;`)
}

// upgradeOne is upgradeQueue for one queue table, name unquoted and table
// quoted and qualified.
func upgradeOne(name, table string) sqlqueue.Stmt {
	return st(upgradeHead + `DECLARE @name nvarchar(128) = ` + literal(name) + `, @t nvarchar(300) = ` + literal(table) + `, @sql nvarchar(max), @online nvarchar(200);
` + upgradeQueue)
}

// QueueTables implements sqlqueue.QueueMigrator: the subscribed queue
// tables, each once, in name order.
func (Dialect) QueueTables(n sqlqueue.Names) sqlqueue.Stmt {
	return st(head + `SELECT DISTINCT queue_table FROM ` + n.Subscriptions + ` ORDER BY queue_table;`)
}

// MigrateQueue implements sqlqueue.QueueMigrator: upgradeQueue on q's
// table, which the engine runs in a transaction of its own before
// migrations 2 and 3, so that each table is schema-locked only while it
// upgrades, not until every other table has (the migrations then find
// nothing left to do, bar a table subscribed meanwhile).
func (Dialect) MigrateQueue(q sqlqueue.Queue) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{upgradeOne(q.Name, q.Table)}
}

// schemaPrefix is the T-SQL expression that qualifies a table name in
// schema ("" for the default schema).
func schemaPrefix(d Dialect, schema string) string {
	if schema == "" {
		return ""
	}
	return literal(d.QuoteIdent(schema)+".") + " + "
}

// The queue table's indexes beside the pending one, as their column lists
// and filters (shared by CreateQueue and the version 2 upgrade).
const (
	// leasedIndex serves the sweeper (Recover, DeadLetterExpired and the
	// stray-row check): it includes every column their predicates read, so
	// rows they skip are filtered in the index, before any key lookup takes
	// a lock.
	leasedIndex = "(lease_until) INCLUDE (attempts, state) WHERE state > 0"
	// expiryIndex lets DropExpired seek the pending rows that have a
	// time-to-live instead of reading the backlog.
	expiryIndex = "(expires_at) WHERE state = 0 AND expires_at IS NOT NULL"
	// pendingIndex is the claim path. It includes ordering_key so that
	// the claim tells keyed rows from unkeyed ones inside the index, with
	// no key lookup per row it passes.
	pendingIndex = "(due_at, id) INCLUDE (expires_at, ordering_key) WHERE state = 0"
	// keyIndex serves the claim's head check of a keyed row: is there a
	// row of its key with a lower id (one seek).
	keyIndex = "(ordering_key, id) WHERE ordering_key IS NOT NULL"
	// inflightIndex serves the claim's other check of a keyed row: is a
	// row of its key fetched or processing (one seek of an index that
	// holds only the leased keyed rows).
	inflightIndex = "(ordering_key) WHERE ordering_key IS NOT NULL AND state > 0"
	// keyColumn is the ordering key column. A binary collation, as the
	// topic's: "A" and "a" are two keys whatever the database's collation.
	keyColumn = "ordering_key nvarchar(255) COLLATE Latin1_General_100_BIN2 NULL"
)

// noEscalation keeps SQL Server from escalating a statement's row locks on
// a queue table to a table lock, which it otherwise tries at 5,000 locks
// held by one statement (or under lock memory pressure): a Complete or
// sweep of many rows (each row locks its clustered key and the keys of
// the indexes it leaves or joins), or a claim over a long backlog, would
// then hold the whole table, and READPAST skips rows, not a table lock:
// every claim, settlement and insert of the queue would wait for it. With
// escalation disabled the locks stay row locks, at about 100 bytes of
// lock memory each; when lock memory itself runs out the statement fails
// with 1204, which the engine waits out as an outage. ALTER TABLE … SET
// cannot be part of CREATE TABLE, hence its own statement.
const noEscalation = "SET (LOCK_ESCALATION = DISABLE)"

// upgradeQueue brings the queue table @t (quoted, qualified; unquoted name
// @name; @sql declared) to the current index set, idempotently: it adds
// the ordering_key column (a metadata-only change: nullable, no default),
// disables lock escalation (noEscalation) where it is not yet, rebuilds a
// pending index that does not include it, creates the key and
// in-flight indexes, creates the expiry index,
// rebuilds a lease index that lacks the state column, and turns OPTIMIZE_FOR_SEQUENTIAL_KEY on for every index where
// the server has it (SQL Server 2019+, Azure SQL Database and Managed
// Instance; 2016 and 2017 refuse the option, hence dynamic SQL). Index
// builds are ONLINE on the editions that allow it (Enterprise and
// Developer, Azure), and where the server has it (SQL Server 2022, Azure)
// wait for their locks at low priority (WAIT_AT_LOW_PRIORITY), queueing
// behind the workload without blocking it, and give up with error 1222
// after lowPriorityMinutes. The caller declares @online nvarchar(200) and
// sets LOCK_TIMEOUT (upgradeHead), so that every other schema change
// waits at most ddlLockTimeout for its lock: a timeout (1222) rolls the
// table's transaction back, and the engine runs it again, as any
// transient error. Each index is found by its name through INDEXPROPERTY
// (NULL when there is none). On Babelfish 4.3 that does not make the DDL
// idempotent: its INDEXPROPERTY compares the name with sys.indexes.name,
// which holds the name it mangled (index name, table name and an MD5 hash,
// checked on the endpoint on 2026-12-07), so a second run still fails with
// 2714 there (docs/transports/sqlserver.md).
const upgradeQueue = `IF OBJECT_ID(@t, N'U') IS NOT NULL
BEGIN
	SET @online = CASE WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
			OR CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 AND CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 16
		THEN N'ONLINE = ON (WAIT_AT_LOW_PRIORITY (MAX_DURATION = ` + lowPriorityMinutes + ` MINUTES, ABORT_AFTER_WAIT = SELF))'
		WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 THEN N'ONLINE = ON' END;
	IF COL_LENGTH(@t, N'ordering_key') IS NULL
	BEGIN
		SET @sql = N'ALTER TABLE ' + @t + N' ADD ` + keyColumn + `';
		EXEC sp_executesql @sql;
	END;
	IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(@t) AND lock_escalation <> 1)
	BEGIN
		SET @sql = N'ALTER TABLE ' + @t + N' ` + noEscalation + `';
		EXEC sp_executesql @sql;
	END;
	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') AND c.name = N'ordering_key')
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_pending') + N' ON ' + @t + N' ` + pendingIndex + `'
			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') IS NULL THEN N''
				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
		EXEC sp_executesql @sql;
	END;
	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_key', 'IndexID') IS NULL
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_key') + N' ON ' + @t + N' ` + keyIndex + `'
			+ COALESCE(N' WITH (' + @online + N')', N'');
		EXEC sp_executesql @sql;
	END;
	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_inflight', 'IndexID') IS NULL
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_inflight') + N' ON ' + @t + N' ` + inflightIndex + `'
			+ COALESCE(N' WITH (' + @online + N')', N'');
		EXEC sp_executesql @sql;
	END;
	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_expiry', 'IndexID') IS NULL
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_expiry') + N' ON ' + @t + N' ` + expiryIndex + `'
			+ COALESCE(N' WITH (' + @online + N')', N'');
		EXEC sp_executesql @sql;
	END;
	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') AND c.name = N'state')
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_leased') + N' ON ' + @t + N' ` + leasedIndex + `'
			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') IS NULL THEN N''
				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
		EXEC sp_executesql @sql;
	END;
	IF CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 15 OR CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
	BEGIN
		SET @sql = N'IF EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(@t) AND index_id > 0 AND optimize_for_sequential_key = 0)
	ALTER INDEX ALL ON ' + @t + N' SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)';
		EXEC sp_executesql @sql, N'@t nvarchar(300)', @t = @t;
	END;
END;
`

// ddlLockTimeout is the LOCK_TIMEOUT, in milliseconds, of the batches
// that create or upgrade a queue table: an ALTER waiting for a
// schema-modification lock blocks every claim, settlement and insert
// queued behind it, so it gives up (1222) after 5 s and its transaction
// runs again (10–100 ms later, three times at most) rather than stall the
// queue for as long as a long reader holds it. lowPriorityMinutes bounds
// an online index build's low-priority wait the same way (1 minute is the
// least WAIT_AT_LOW_PRIORITY takes).
const (
	ddlLockTimeout     = "5000"
	lowPriorityMinutes = "1"
)

// upgradeHead opens every batch that creates or upgrades a queue table.
const upgradeHead = head + "SET LOCK_TIMEOUT " + ddlLockTimeout + ";\n"

// CreateQueue implements sqlqueue.Dialect. The filtered index on pending
// rows is the claim path: a claimed row leaves it, so concurrent claims
// never scan past other instances' claimed rows. A new table has lock
// escalation disabled at once (noEscalation). The lease index serves
// the sweeper, the expiry index DropExpired. The primary key is left
// unnamed: constraint names share a namespace with table names in a
// schema. The last statement (upgradeQueue) also upgrades a table an
// earlier version made, creates the ordering key indexes, and turns
// OPTIMIZE_FOR_SEQUENTIAL_KEY on where the server has it: the identity key and the time-ordered indexes all insert
// at their last page.
func (d Dialect) CreateQueue(q sqlqueue.Queue) []sqlqueue.Stmt {
	pending, leased := q.Name+"_pending", q.Name+"_leased"
	return []sqlqueue.Stmt{
		st(upgradeHead + `IF OBJECT_ID(` + literal(q.Table) + `, N'U') IS NULL
BEGIN
CREATE TABLE ` + q.Table + ` (
	id          bigint IDENTITY(1, 1) NOT NULL PRIMARY KEY CLUSTERED,
	uuid        nvarchar(255)  NOT NULL,
	headers     nvarchar(max)  NOT NULL,
	body        varbinary(max) NOT NULL,
	state       tinyint        NOT NULL DEFAULT 0,
	owner       bigint         NULL,
	attempts    int            NOT NULL DEFAULT 0,
	created_at  datetime2(3)   NOT NULL DEFAULT SYSUTCDATETIME(),
	due_at      datetime2(3)   NOT NULL DEFAULT SYSUTCDATETIME(),
	lease_until datetime2(3)   NULL,
	expires_at  datetime2(3)   NULL,
	` + keyColumn + `
);
ALTER TABLE ` + q.Table + ` ` + noEscalation + `;
END`),
		st(upgradeHead + `IF INDEXPROPERTY(OBJECT_ID(` + literal(q.Table) + `), ` + literal(pending) + `, 'IndexID') IS NULL
CREATE INDEX ` + d.QuoteIdent(pending) + ` ON ` + q.Table + ` ` + pendingIndex),
		st(upgradeHead + `IF INDEXPROPERTY(OBJECT_ID(` + literal(q.Table) + `), ` + literal(leased) + `, 'IndexID') IS NULL
CREATE INDEX ` + d.QuoteIdent(leased) + ` ON ` + q.Table + ` ` + leasedIndex),
		upgradeOne(q.Name, q.Table),
	}
}

// Subscribe implements sqlqueue.Dialect: insert-if-missing under a
// key-range lock (UPDLOCK, HOLDLOCK), so concurrent subscribers of the same
// pair neither both insert nor fail on the primary key.
func (Dialect) Subscribe(n sqlqueue.Names, q sqlqueue.Queue) sqlqueue.Stmt {
	return st(head+`IF NOT EXISTS (SELECT 1 FROM `+n.Subscriptions+` WITH (UPDLOCK, HOLDLOCK) WHERE topic = @p1 AND consumer_group = @p2)
INSERT INTO `+n.Subscriptions+` (topic, consumer_group, queue_table) VALUES (@p1, @p2, @p3);`,
		nv(q.Topic), nv(q.Group), nv(q.Name))
}

// Subscriptions implements sqlqueue.Dialect.
func (Dialect) Subscriptions(n sqlqueue.Names, topic string) sqlqueue.Stmt {
	return st(head+`SELECT queue_table FROM `+n.Subscriptions+` WHERE topic = @p1 ORDER BY consumer_group;`, nv(topic))
}

// Insert implements sqlqueue.Dialect: one INSERT … SELECT per chunk of
// rows, its rows one JSON document in one nvarchar(max) parameter (see
// Plan reuse): OPENJSON reads them back, decoding each base64 body into
// varbinary(max). A chunk ends at MaxRowsPerInsert rows or before its
// document would pass MaxInsertBytes, and holds at least one row. The row
// number n orders the SELECT, so identity values (and so delivery order)
// follow the order of rows; due and expiry times are computed once, on
// the server's clock. The batch sets READ COMMITTED (see Isolation);
// InsertInTx, for a caller's transaction, does not.
//
// The price of one plan is the encoding: a body crosses the wire as base64
// in UTF-16, 2.67 bytes per byte (a 1 KiB body is 2,736 bytes). A
// table-valued parameter would send a body as varbinary, 1 byte per byte
// (docs/transports/sqlserver.md, Insert size, has the measurement).
//
// # Ordering keys
//
// Before it inserts, each statement takes an exclusive application lock
// per distinct ordering key of its queue (keyLocks), in key order (binary
// order, so two inserts never wait for each other in a cycle), owned by
// the transaction: the publishing transaction holds it until it commits
// or rolls back, so the next insert of the key draws its ids after this
// one's fate is known, and a key's ids are in commit order — what the
// claim's head check relies on (see Claim), as PostgreSQL's advisory lock
// does. The first statement of a publish locks the keys of all its rows
// (@p2, the distinct keys as a JSON array), the others none ("[]"): a
// publish over several statements still takes its keys in one ascending
// pass. A statement outside a transaction (a one-statement publish)
// opens one for the lock and the insert, and commits or rolls it back
// itself; one with no keyed row opens none and takes no lock. A key lock
// not granted within LockTimeout (another transaction publishing the key
// holds it that long), or refused as a deadlock victim, raises
// LockTimeoutError.
func (Dialect) Insert(q sqlqueue.Queue, rows []sqlqueue.InsertRow) []sqlqueue.Stmt {
	return inserts(insertText(q, headLocking), rows)
}

// InsertInTx implements sqlqueue.CallerTxDialect: Insert for a caller's
// transaction (Publisher.WithTx), which runs at the caller's isolation
// level (see Isolation).
func (Dialect) InsertInTx(q sqlqueue.Queue, rows []sqlqueue.InsertRow) []sqlqueue.Stmt {
	return inserts(insertText(q, headNow), rows)
}

// inserts splits rows into Insert's chunks, each a statement of text.
// A chunk's document is at most MaxInsertBytes long unless it holds a
// single row.
func inserts(text string, rows []sqlqueue.InsertRow) []sqlqueue.Stmt {
	var out []sqlqueue.Stmt
	keys := keysJSON(rows)
	var doc, row []byte
	n := 0 // rows in doc
	flush := func() {
		out = append(out, st(text, nv(string(append(doc, ']'))), nv(keys)))
		doc, keys, n = doc[:0], "[]", 0
	}
	for i, r := range rows {
		if n == MaxRowsPerInsert {
			flush()
		}
		row = appendRow(row[:0], n+1, r)
		if n > 0 && len(doc)+len(row)+2 > MaxInsertBytes {
			flush()
			row = appendRow(row[:0], 1, r)
		}
		if n == 0 {
			doc = slices.Grow(doc, chunkSize(rows[i:]))
			doc = append(doc, '[')
		} else {
			doc = append(doc, ',')
		}
		doc = append(doc, row...)
		n++
	}
	if n > 0 {
		flush()
	}
	return out
}

// rowSize estimates the bytes appendRow writes for r, to size buffers
// (escapes in the headers can make the row longer; inserts measures the
// row itself).
func rowSize(r sqlqueue.InsertRow) int {
	return 64 + len(r.UUID) + 2*len(r.Headers) + base64.StdEncoding.EncodedLen(len(r.Body)) + len(r.OrderingKey)
}

// chunkSize estimates the document of the chunk that starts with rows[0].
func chunkSize(rows []sqlqueue.InsertRow) int {
	size := 2
	for i, r := range rows {
		if i == MaxRowsPerInsert || i > 0 && size+rowSize(r) > MaxInsertBytes {
			break
		}
		size += rowSize(r)
	}
	return size
}

// keyLockTimeout is the key locks' wait, LockTimeout in milliseconds.
var keyLockTimeout = strconv.FormatInt(LockTimeout.Milliseconds(), 10)

// keyLocks takes the application lock of each key of @keys in key order.
// The resource is the queue table's object id and the SHA-256 of the key
// (a key is up to 255 characters, the resource at most 255): the same
// table whatever schema a session defaults to, and two keys that differ
// only in case or accents two locks, as the column's binary collation
// makes them two keys.
func keyLocks(q sqlqueue.Queue) string {
	return `	SET @table = CAST(OBJECT_ID(` + literal(q.Table) + `) AS nvarchar(11));
	IF @@TRANCOUNT = 0 AND EXISTS (SELECT 1 FROM @keys)
	BEGIN
		BEGIN TRANSACTION;
		SET @own = 1;
	END;
	WHILE 1 = 1
	BEGIN
		SET @next = NULL;
		SELECT TOP (1) @next = k FROM @keys WHERE @prev IS NULL OR k > @prev ORDER BY k;
		IF @next IS NULL BREAK;
		SET @res = N'berth:key:' + @table + N':' + CONVERT(nvarchar(64), HASHBYTES('SHA2_256', @next), 2);
		EXEC @r = sp_getapplock @Resource = @res, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = ` + keyLockTimeout + `;
		IF @r < 0
		BEGIN
			SET @m = N'berth: ordering key lock ' + @res + N' not granted within ` + keyLockTimeout + ` ms (sp_getapplock returned ' + CAST(@r AS nvarchar(11)) + N'; -1 is a timeout, -3 a deadlock victim): another transaction publishing the key holds it';
			THROW ` + strconv.Itoa(LockTimeoutError) + `, @m, 1;
		END;
		SET @prev = @next;
	END;
`
}

// insertText is Insert's statement for q after h, the batch's head (see
// Insert, Ordering keys).
func insertText(q sqlqueue.Queue, h string) string {
	return h + `DECLARE @own bit = 0, @r int, @table nvarchar(11), @res nvarchar(255), @m nvarchar(2048), @prev nvarchar(255), @next nvarchar(255);
` + keysVar("@p2") + `BEGIN TRY
` + keyLocks(q) + `	INSERT INTO ` + q.Table + ` (uuid, headers, body, due_at, expires_at, ordering_key)
	SELECT v.uuid, v.headers, v.body, ` + after("v.delay_ms") + `,
		CASE WHEN v.ttl_ms > 0 THEN ` + after("v.ttl_ms") + ` END, v.ordering_key
	FROM OPENJSON(@p1) WITH (n int '$.n', uuid nvarchar(255) '$.u', headers nvarchar(max) '$.h', body varbinary(max) '$.b', delay_ms bigint '$.d', ttl_ms bigint '$.t', ordering_key nvarchar(255) '$.k') AS v
	ORDER BY v.n;
	IF @own = 1 COMMIT TRANSACTION;
END TRY
BEGIN CATCH
	IF @own = 1 AND @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
	THROW;
END CATCH;`
}

// keysVar declares the table variable @keys and fills it with the
// distinct ordering keys of the JSON array of strings in param, in the
// column's binary collation (so that they compare with ordering_key as
// the column does, and seek its indexes).
func keysVar(param string) string {
	return `DECLARE @keys TABLE (k nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
INSERT INTO @keys (k)
SELECT DISTINCT j.k COLLATE Latin1_General_100_BIN2 FROM OPENJSON(` + param + `) WITH (k nvarchar(255) '$') AS j WHERE j.k IS NOT NULL;
`
}

// keysJSON is the distinct ordering keys of rows, ascending, as the JSON
// array of strings Insert locks (@p2).
func keysJSON(rows []sqlqueue.InsertRow) string {
	var keys []string
	for _, r := range rows {
		if r.OrderingKey != "" {
			keys = append(keys, r.OrderingKey)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	b := []byte{'['}
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
	}
	return string(append(b, ']'))
}

// appendRow appends r as the JSON object Insert reads: n (its 1-based
// order in the statement), u (uuid), h (headers, a string), b (body,
// base64), d (delay) and t (time-to-live) in milliseconds, and k (the
// ordering key) when the row has one (a missing k reads as NULL).
func appendRow(b []byte, n int, r sqlqueue.InsertRow) []byte {
	b = slices.Grow(b, rowSize(r))
	b = append(b, `{"n":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"u":`...)
	b = appendJSONString(b, r.UUID)
	b = append(b, `,"h":`...)
	b = appendJSONString(b, string(r.Headers))
	b = append(b, `,"b":"`...)
	b = base64.StdEncoding.AppendEncode(b, r.Body)
	b = append(b, `","d":`...)
	b = strconv.AppendInt(b, ms(r.Delay), 10)
	b = append(b, `,"t":`...)
	b = strconv.AppendInt(b, ms(r.TTL), 10)
	if r.OrderingKey != "" {
		b = append(b, `,"k":`...)
		b = appendJSONString(b, r.OrderingKey)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json writes it (and as an nvarchar column would
// store it).
func appendJSONString(b []byte, s string) []byte {
	v, _ := json.Marshal(s) // a string always marshals
	return append(b, v...)
}

// claimHead opens the claim: READ COMMITTED as every locking batch (see
// headLocking), and DEADLOCK_PRIORITY LOW, so that when a claim meets a
// settlement, a sweep or an insert in a deadlock, the server rolls the
// claim back (1205), which the engine runs again at once and which loses
// nothing, rather than the other side, which may be a publish inside the
// caller's own transaction. Both settings are scoped to the sp_executesql
// call.
const claimHead = head + "SET DEADLOCK_PRIORITY LOW;\nSET TRANSACTION ISOLATION LEVEL READ COMMITTED;\nDECLARE @now datetime2(3) = SYSUTCDATETIME();\n"

// Claim implements sqlqueue.Dialect in two statements, so that it locks
// only the rows it takes.
//
// The first picks the ids of at most n claimable rows, oldest due first,
// into @c: a seek of the pending index that holds no lock past the row
// it reads (READ COMMITTED, no UPDLOCK), skips rows other transactions
// hold (READPAST: a row another claim is taking, an uncommitted insert),
// and reads the latest committed rows even where READ_COMMITTED_SNAPSHOT
// is on (READCOMMITTEDLOCK: a versioned read could see a row another claim
// has already taken as pending). A row it passes over — a keyed row that
// does not head its key — is read and released, never locked until the
// claim ends: over a backlog of blocked keys the claim no longer gathers a
// lock per row it rejects (5,000 of them would escalate to a table lock,
// which READPAST cannot skip, were escalation not disabled on the table).
//
// The second takes them: an UPDATE of the queue table joined to @c by
// primary key, ROWLOCK and READPAST (a row another claim holds is left to
// it), that takes a row only if it is still pending and due — another
// claim may have taken it, or a settlement retried it with a delay, since
// the first statement read it. So the claim may return fewer rows than
// it picked; never one that another claim holds.
//
// The plan is pinned: INDEX and FORCESEEK make the pick a seek on the
// pending index whatever the optimizer guesses for @now (a local variable)
// or sniffs for TOP (@p1) at the first compile, which may happen on an
// empty, just-created table; the take seeks the primary key for each id.
//
// # Ordering keys
//
// A keyed row is picked only when it heads its key: no row of the key has
// a lower id (the e probe, a seek of the key index), and no row of the key
// is fetched or processing (the f probe, a seek of the in-flight index).
// Both are plain locking reads: no HOLDLOCK, no range lock, no lock held
// past the row read, and no READPAST, which would read a row that a
// Complete is deleting as gone before its commit.
//
// Why that keeps a key's order and one row per key in flight (the
// invariant PostgreSQL's dialect keeps with its advisory lock; see
// Insert): Insert takes the key's application lock before it draws the
// ids of its keyed rows and holds it until its transaction ends, so the
// next insert of the key draws its ids only after this one committed or
// rolled back: a key's ids are in commit order. So when a claim reads
// row b of key k (committed: READPAST skipped it until then), every row
// of k with a lower id has committed (or never will exist), and no row of
// k with a lower id can appear later (identity values only grow). Rows
// are deleted only when settled, never re-inserted, and Retry, Release
// and Recover keep a row's id. So the e probe, reading committed rows and
// waiting on an uncommitted delete, finds a lower row of k whenever one
// exists; and once b heads its key it heads it until it is settled, so
// the time between pick and take changes nothing but b's own state, which
// the take checks again. Two rows of one key are never fetched or
// processing at once, and a key's rows are claimed in id order, which is
// commit order. The range lock that the earlier claim's HOLDLOCK probe
// held on other keys' head rows until the claim ended — the deadlocks with
// Complete, the sweep and keyed inserts — was standing in for this insert
// lock.
//
// The f probe is redundant under that invariant; it stays as a defence
// for rows inserted without the key lock (a publisher of an earlier
// version during a rolling upgrade): a key may then be claimed out of
// order, but still one row at a time.
func (Dialect) Claim(q sqlqueue.Queue, owner int64, n int, fetchTimeout time.Duration) sqlqueue.Stmt {
	return st(claimHead+`DECLARE @c TABLE (id bigint NOT NULL PRIMARY KEY);
DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NOT NULL, body varbinary(max) NOT NULL, attempts int NOT NULL);
`+claimPick(q, "id", "")+claimTake(q, "state = 1, owner = @p2, lease_until = "+after("@p3"), "")+`SELECT id, uuid, headers, body, attempts FROM @t;`,
		int64(n), owner, ms(fetchTimeout))
}

// claimPick is the claim's pick (see Claim): the ids of at most @p1
// claimable rows into @c's columns cols, oldest due first, each with the
// expressions extra after its id.
func claimPick(q sqlqueue.Queue, cols, extra string) string {
	d := Dialect{}
	return `INSERT INTO @c (` + cols + `)
SELECT TOP (@p1) p.id` + extra + `
FROM ` + q.Table + ` AS p WITH (INDEX(` + d.QuoteIdent(q.Name+"_pending") + `), FORCESEEK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
WHERE p.state = 0 AND p.due_at <= @now AND (p.expires_at IS NULL OR p.expires_at > @now)
	AND (p.ordering_key IS NULL OR (` + keyProbes(q) + `))
ORDER BY p.due_at, p.id;
`
}

// keyProbes is the claim's head check of the keyed row p (see Claim,
// Ordering keys): no row of its key with a lower id (e), none of its key
// fetched or processing (f).
func keyProbes(q sqlqueue.Queue) string {
	d := Dialect{}
	return `
		NOT EXISTS (SELECT 1 FROM ` + q.Table + ` AS e WITH (INDEX(` + d.QuoteIdent(q.Name+"_key") + `), FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
			WHERE e.ordering_key IS NOT NULL AND e.ordering_key = p.ordering_key AND e.id < p.id)
		AND NOT EXISTS (SELECT 1 FROM ` + q.Table + ` AS f WITH (INDEX(` + d.QuoteIdent(q.Name+"_inflight") + `), FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
			WHERE f.ordering_key IS NOT NULL AND f.state > 0 AND f.ordering_key = p.ordering_key)`
}

// claimTake is the claim's take (see Claim): the rows of @c still
// pending and due, set by set, output with the columns id, uuid, headers,
// body, attempts and the expressions extra into @t.
func claimTake(q sqlqueue.Queue, set, extra string) string {
	return `UPDATE q SET ` + set + `
OUTPUT inserted.id, inserted.uuid, inserted.headers, inserted.body, inserted.attempts` + extra + ` INTO @t
FROM ` + q.Table + ` AS q WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
INNER JOIN @c AS c ON q.id = c.id
WHERE q.state = 0 AND q.due_at <= @now AND (q.expires_at IS NULL OR q.expires_at > @now);
`
}

// The direct claim's table variables: @c numbers the picked rows' claim
// order into started (the first @p4 of them), and @t holds the state of
// each row it returns, and (ClaimComplete) the rows deleted, with NULL
// headers and body.
const directVars = `DECLARE @c TABLE (id bigint NOT NULL PRIMARY KEY, started bit NOT NULL);
DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NULL, body varbinary(max) NULL, attempts int NOT NULL, state smallint NOT NULL);
`

// directClaim is ClaimDirect's pick and take: Claim's pick, numbering the
// rows in claim order (ROW_NUMBER over the pick's own ORDER BY, which the
// pending index's seek already delivers: no sort), and a take that sets
// the first @p4 to processing as Begin would (attempts + 1, the lease
// @p5) and the others to fetched (the fetch timeout @p3).
func directClaim(q sqlqueue.Queue) string {
	return claimPick(q, "id, started", directNumber) + directTake(q)
}

// directNumber numbers the picked rows in claim order (see directClaim).
const directNumber = ", CASE WHEN ROW_NUMBER() OVER (ORDER BY p.due_at, p.id) <= @p4 THEN 1 ELSE 0 END"

// directTake is ClaimDirect's take (see directClaim).
func directTake(q sqlqueue.Queue) string {
	return claimTake(q, `state = CASE WHEN c.started = 1 THEN 2 ELSE 1 END, owner = @p2,
	attempts = q.attempts + CASE WHEN c.started = 1 THEN 1 ELSE 0 END,
	lease_until = CASE WHEN c.started = 1 THEN `+after("@p5")+` ELSE `+after("@p3")+` END`, ", inserted.state")
}

// ClaimDirect implements sqlqueue.DirectDialect: Claim's batch (its head,
// its pick and its take, with every property Claim documents), whose pick
// also numbers the rows it picks in claim order, and whose take sets the
// first direct of them (@p4, the oldest due) to processing as Begin would
// — attempts + 1, the lease (@p5) — and the others to fetched with the
// fetch timeout (@p3), in the same UPDATE: one statement where a claim
// and a Begin were two. It returns the columns id, uuid, headers, body,
// attempts, state.
//
// The numbering is the pick's: a picked row that another claim takes
// before this take reaches it (the pick locks nothing) is skipped by the
// take with its number, so a claim that loses rows may start fewer than
// direct, never more (transport.DirectClaimer allows at most direct); the
// receive loop then frees the permits it had reserved for them.
func (Dialect) ClaimDirect(q sqlqueue.Queue, owner int64, n, direct int, fetchTimeout, lease time.Duration) sqlqueue.Stmt {
	return st(claimHead+directVars+directClaim(q)+`SELECT id, uuid, headers, body, attempts, state FROM @t;`,
		int64(n), owner, ms(fetchTimeout), int64(max(direct, 0)), ms(lease))
}

// ClaimComplete implements sqlqueue.AckRider: ClaimDirect's batch with
// Complete's DELETE of the done refs (@p6; fenced as Complete's: id, owner,
// state 2, pinned the same way) before the pick, its rows output into @t
// with state sqlqueue.StateAcked. The batch is one transaction
// (XACT_ABORT: an error rolls back the acks with the claim), so a claim
// run again after a deadlock or a lost reply finds its acks again rather
// than reporting them lost because its first run had committed them.
//
// The pick runs after the DELETE in the same transaction and sees it: a
// keyed row whose head the batch deletes heads its key at once and can be
// claimed by the same batch (PostgreSQL's statement, one snapshot, cannot;
// either keeps the key's order, since the head is gone). The deleted rows
// stay locked until the batch commits, so another claim's key probe of
// such a key waits for this batch, which lasts one claim: two such batches
// that each wait for a key the other just settled deadlock, and one of them
// (DEADLOCK_PRIORITY LOW, both) is rolled back whole and run again.
func (Dialect) ClaimComplete(q sqlqueue.Queue, owner int64, n, direct int, fetchTimeout, lease time.Duration, done []sqlqueue.Ref) sqlqueue.Stmt {
	return st(claimHead+`SET XACT_ABORT ON;
`+directVars+`BEGIN TRANSACTION;
`+riderDelete(q, "@p6")+directClaim(q)+`COMMIT TRANSACTION;
SELECT id, uuid, headers, body, attempts, state FROM @t;`,
		int64(n), owner, ms(fetchTimeout), int64(max(direct, 0)), ms(lease), nv(refsJSON(done)))
}

// riderDelete is ClaimComplete's DELETE of the riding acks, the refs in
// param: Complete's, its rows output into @t with state
// sqlqueue.StateAcked.
func riderDelete(q sqlqueue.Queue, param string) string {
	return `DELETE q
OUTPUT deleted.id, N'', NULL, NULL, 0, ` + strconv.Itoa(sqlqueue.StateAcked) + ` INTO @t
FROM ` + q.Table + ` AS q` + settledHints + `
INNER JOIN ` + strings.Replace(refsTable, "@p1", param, 1) + `
WHERE q.state = 2` + pinLoop + `;
`
}

// ClaimKeys implements sqlqueue.KeyClaimer: ClaimDirect's batch (its head,
// its take, its numbering, Claim's key probes) whose pick reads the heads
// of the given keys only, not the pending index: per key of @p6 (a JSON
// array of strings, into @keys as Insert reads its keys, so the text is
// the same for any number of keys), its candidate is the first row of the
// key index (TOP (1) by id, one seek), then that row itself (a seek of the
// primary key), taken when it is pending, due and not expired, and when
// Claim's probes find no row of its key with a lower id and none in
// flight; at most @p1 rows, oldest due first, the first @p4 started.
//
// The candidate's seek passes locked rows (READPAST): it never waits for a
// publisher's uncommitted insert of the key, which may be the caller's own
// open transaction (Publisher.WithTx), nor for one of the next key in the
// index when the key has no committed row left. The exactness is the
// probes': a head row that a Complete is deleting is passed over by the
// candidate's seek, and the next row is then checked by the e probe,
// which, as in Claim, reads without READPAST and waits for the delete's
// fate: committed, the next row heads its key; rolled back, it does not.
// An uncommitted insert of the key draws ids above every committed row of
// it (Insert's key lock), so no probe's range reaches it.
//
// With done (the acks riding on the claim), the batch is ClaimComplete's:
// one XACT_ABORT transaction whose DELETE of the refs in @p7 (riderDelete,
// fenced as Complete) runs before the pick, which sees it: a deleted ack
// no longer heads its key, and the key's next row can be taken by the
// same batch. Without, it is ClaimDirect's, in no transaction of its own.
//
// There is no waiting marker on SQL Server (no sqlqueue.HeadPromoter): a
// full claim over hot keys' backlog still reads their blocked rows (see
// Claim); the hand-off spares the claim that follows a settlement that
// walk. The keys' bounds (from) are not used: a ghost record of a deleted
// row is passed by the seek until SQL Server's cleanup removes it, and no
// server here could measure whether a bounded seek pays for its longer
// statement.
func (Dialect) ClaimKeys(q sqlqueue.Queue, owner int64, keys []string, _ []int64, n, direct int, fetchTimeout, lease time.Duration, done []sqlqueue.Ref) sqlqueue.Stmt {
	if keys == nil {
		keys = []string{} // "[]", not "null", for OPENJSON
	}
	ks, _ := json.Marshal(keys) // strings always marshal
	args := []any{int64(n), owner, ms(fetchTimeout), int64(max(direct, 0)), ms(lease), nv(string(ks))}
	pick := keysPick(q) + directTake(q)
	if len(done) == 0 {
		return st(claimHead+directVars+keysVar("@p6")+pick+`SELECT id, uuid, headers, body, attempts, state FROM @t;`, args...)
	}
	return st(claimHead+`SET XACT_ABORT ON;
`+directVars+keysVar("@p6")+`BEGIN TRANSACTION;
`+riderDelete(q, "@p7")+pick+`COMMIT TRANSACTION;
SELECT id, uuid, headers, body, attempts, state FROM @t;`, append(args, nv(refsJSON(done)))...)
}

// keysPick is ClaimKeys' pick: the heads of @keys into @c, numbered as
// ClaimDirect's. The plan is pinned as the settlements' are: a loop over
// @keys, each key one seek of the key index (INDEX, FORCESEEK) and its
// candidate one seek of the primary key (FORCESEEK; the key index's rows
// carry id, the clustered key), the probes as Claim's.
func keysPick(q sqlqueue.Queue) string {
	d := Dialect{}
	return `INSERT INTO @c (id, started)
SELECT TOP (@p1) p.id` + directNumber + `
FROM @keys AS k
CROSS APPLY (SELECT TOP (1) x.id FROM ` + q.Table + ` AS x WITH (INDEX(` + d.QuoteIdent(q.Name+"_key") + `), FORCESEEK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
	WHERE x.ordering_key IS NOT NULL AND x.ordering_key = k.k ORDER BY x.id) AS h
INNER JOIN ` + q.Table + ` AS p WITH (FORCESEEK, READPAST, ROWLOCK, READCOMMITTEDLOCK) ON p.id = h.id
WHERE p.state = 0 AND p.due_at <= @now AND (p.expires_at IS NULL OR p.expires_at > @now)
	AND p.ordering_key IS NOT NULL AND (` + keyProbes(q) + `)
ORDER BY p.due_at, p.id` + pinLoop + `;
`
}

// ReleaseDirect implements sqlqueue.DirectDialect: Release for rows that
// ClaimDirect started and that never reached user code, fenced on state 2,
// taking back the attempt the claim counted; pinned as every settlement.
func (Dialect) ReleaseDirect(q sqlqueue.Queue, refs []sqlqueue.Ref) sqlqueue.Stmt {
	return st(headRC+`DECLARE @t TABLE (id bigint NOT NULL);
UPDATE q SET state = 0, owner = NULL, lease_until = NULL, attempts = CASE WHEN q.attempts > 0 THEN q.attempts - 1 ELSE 0 END
OUTPUT inserted.id INTO @t
FROM `+q.Table+` AS q`+settledHints+`
INNER JOIN `+refsTable+`
WHERE q.state = 2`+pinLoop+`;
SELECT id FROM @t;`, nv(refsJSON(refs)))
}

// MultiProbe implements sqlqueue.MultiProber: per queue, TOP (1) seeks of
// the pending index (a due row; the earliest future row) and of the
// clustered key (any row), as one UNION ALL under READ COMMITTED. READPAST
// with READCOMMITTEDLOCK, as in Claim: a row locked by a claim or by an
// uncommitted insert is skipped rather than waited for (the claim or the
// insert's commit is followed by its own wake-up or the next probe).
// Queue names are engine-made identifiers ([a-z0-9_]), written as N”
// literals; the statement takes no argument.
func (d Dialect) MultiProbe(qs []sqlqueue.Queue) sqlqueue.Stmt {
	// In name order: the same parked queues give the same text, so the
	// statement's plan is reused instead of compiled again per order.
	qs = slices.SortedFunc(slices.Values(qs), func(a, b sqlqueue.Queue) int { return strings.Compare(a.Name, b.Name) })
	var b strings.Builder
	b.WriteString(headLocking)
	for i, q := range qs {
		if i > 0 {
			b.WriteString("\nUNION ALL\n")
		}
		pending := q.Table + ` WITH (INDEX(` + d.QuoteIdent(q.Name+"_pending") + `), FORCESEEK, READPAST, READCOMMITTEDLOCK)`
		b.WriteString(`SELECT N'` + strings.ReplaceAll(q.Name, "'", "''") + `' AS queue_table,
	CASE WHEN EXISTS (SELECT TOP (1) 1 FROM ` + pending + ` WHERE state = 0 AND due_at <= @now AND (expires_at IS NULL OR expires_at > @now)) THEN 1 ELSE 0 END AS ready,
	(SELECT TOP (1) DATEDIFF_BIG(millisecond, @now, due_at) FROM ` + pending + ` WHERE state = 0 AND due_at > @now ORDER BY due_at) AS next_ms,
	CASE WHEN EXISTS (SELECT TOP (1) 1 FROM ` + q.Table + ` WITH (READPAST, READCOMMITTEDLOCK)) THEN 0 ELSE 1 END AS empty`)
	}
	b.WriteString(";")
	return st(b.String())
}

// refsJSON encodes refs as the JSON array that refsTable reads.
func refsJSON(refs []sqlqueue.Ref) string {
	b := make([]byte, 0, 2+len(refs)*40)
	b = append(b, '[')
	for i, r := range refs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = strconv.AppendInt(b, r.ID, 10)
		b = append(b, `,"owner":`...)
		b = strconv.AppendInt(b, r.Owner, 10)
		b = append(b, '}')
	}
	return string(append(b, ']'))
}

// refsTable is the fenced join source of every follow-up statement: the
// id/owner pairs arrive as one JSON argument (@p1), so the statement text
// is the same for 1 or 1,000 refs and never nears the parameter limit.
const refsTable = `OPENJSON(@p1) WITH (id bigint '$.id', owner bigint '$.owner') AS r ON q.id = r.id AND q.owner = r.owner`

// settledHints are the queue table's hints in every settlement (Begin,
// Complete, Renew, Retry, Release), and pinLoop its query hint, which
// together pin the plan to a nested loop over the refs with one seek of
// the primary key per ref, whatever the optimizer would pick for a plan
// compiled while the table was empty (a scan of the clustered index, every
// row read under the update lock the statement takes on its target):
// FORCESEEK leaves the clustered key as the only access path (no other
// index leads with id), and LOOP JOIN makes the refs the outer input.
// ROWLOCK keeps the locks on the rows; READCOMMITTEDLOCK makes the fence
// read the row's latest committed state even where
// READ_COMMITTED_SNAPSHOT is on.
//
// No READPAST, unlike the claim and the sweeps: a settlement must find its
// own row even when another session holds a lock on it — a sweep deciding
// on it, a claim's pick reading it, a handler's transaction deleting it
// (CompleteTx), a console cancel — and wait for that lock: skipping the
// row would report a lease lost (transport.ErrLeaseLost) for a row whose
// lease is held, and redeliver it. The fence (id, owner, state) decides
// once the lock is granted.
const (
	settledHints = ` WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)`
	pinLoop      = "\nOPTION (LOOP JOIN)"
)

// Begin implements sqlqueue.Dialect.
func (Dialect) Begin(q sqlqueue.Queue, refs []sqlqueue.Ref, lease time.Duration) sqlqueue.Stmt {
	return st(headLocking+`DECLARE @t TABLE (id bigint NOT NULL, attempts int NOT NULL);
UPDATE q SET state = 2, attempts = q.attempts + 1, lease_until = `+after("@p2")+`
OUTPUT inserted.id, inserted.attempts INTO @t
FROM `+q.Table+` AS q`+settledHints+`
INNER JOIN `+refsTable+`
WHERE q.state = 1`+pinLoop+`;
SELECT id, attempts FROM @t;`, nv(refsJSON(refs)), ms(lease))
}

// Complete implements sqlqueue.Dialect.
func (Dialect) Complete(q sqlqueue.Queue, refs []sqlqueue.Ref) sqlqueue.Stmt {
	return st(completeText(q, headRC), nv(refsJSON(refs)))
}

// CompleteInTx implements sqlqueue.CallerTxDialect: Complete for the
// handler's transaction (sqlqueue.Source.CompleteTx), which runs at the
// level the handler left it at (see Isolation).
func (Dialect) CompleteInTx(q sqlqueue.Queue, refs []sqlqueue.Ref) sqlqueue.Stmt {
	return st(completeText(q, head), nv(refsJSON(refs)))
}

func completeText(q sqlqueue.Queue, h string) string {
	return h + `DECLARE @t TABLE (id bigint NOT NULL);
DELETE q
OUTPUT deleted.id INTO @t
FROM ` + q.Table + ` AS q` + settledHints + `
INNER JOIN ` + refsTable + `
WHERE q.state = 2` + pinLoop + `;
SELECT id FROM @t;`
}

// Renew implements sqlqueue.Dialect.
func (Dialect) Renew(q sqlqueue.Queue, refs []sqlqueue.Ref, lease time.Duration) sqlqueue.Stmt {
	return st(headLocking+`DECLARE @t TABLE (id bigint NOT NULL);
UPDATE q SET lease_until = `+after("@p2")+`
OUTPUT inserted.id INTO @t
FROM `+q.Table+` AS q`+settledHints+`
INNER JOIN `+refsTable+`
WHERE q.state = 2`+pinLoop+`;
SELECT id FROM @t;`, nv(refsJSON(refs)), ms(lease))
}

// Retry implements sqlqueue.Dialect; each ref carries its own delay.
func (Dialect) Retry(q sqlqueue.Queue, rows []sqlqueue.RetryRef) sqlqueue.Stmt {
	b := make([]byte, 0, 2+len(rows)*56)
	b = append(b, '[')
	for i, r := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = strconv.AppendInt(b, r.ID, 10)
		b = append(b, `,"owner":`...)
		b = strconv.AppendInt(b, r.Owner, 10)
		b = append(b, `,"delay_ms":`...)
		b = strconv.AppendInt(b, ms(r.Delay), 10)
		b = append(b, `,"line":`...)
		b = appendJSONString(b, r.Line)
		b = append(b, '}')
	}
	b = append(b, ']')
	const path = `'$.` + transport.MetadataAttemptErrors + `'`
	v := `ISNULL(JSON_VALUE(q.headers, ` + path + `), N'') + r.line`
	n := strconv.Itoa(transport.MaxAttemptErrors)
	tail := `RIGHT(` + v + `, ` + n + `)`
	return st(headLocking+`DECLARE @t TABLE (id bigint NOT NULL);
UPDATE q SET state = 0, owner = NULL, lease_until = NULL, due_at = `+after("r.delay_ms")+`,
	headers = CASE WHEN ISJSON(q.headers) = 0 OR LEFT(LTRIM(q.headers), 1) <> N'{' THEN q.headers
		ELSE JSON_MODIFY(q.headers, `+path+`, CASE WHEN LEN(`+v+`) <= `+n+` THEN `+v+`
			ELSE SUBSTRING(`+tail+`, CHARINDEX(NCHAR(10), `+tail+`) + 1, `+n+`) END) END
OUTPUT inserted.id INTO @t
FROM `+q.Table+` AS q`+settledHints+`
INNER JOIN OPENJSON(@p1) WITH (id bigint '$.id', owner bigint '$.owner', delay_ms bigint '$.delay_ms', line nvarchar(1000) '$.line') AS r ON q.id = r.id AND q.owner = r.owner
WHERE q.state = 2`+pinLoop+`;
SELECT id FROM @t;`, nv(string(b)))
}

// Release implements sqlqueue.Dialect.
func (Dialect) Release(q sqlqueue.Queue, refs []sqlqueue.Ref) sqlqueue.Stmt {
	return st(headRC+`DECLARE @t TABLE (id bigint NOT NULL);
UPDATE q SET state = 0, owner = NULL, lease_until = NULL
OUTPUT inserted.id INTO @t
FROM `+q.Table+` AS q`+settledHints+`
INNER JOIN `+refsTable+`
WHERE q.state = 1`+pinLoop+`;
SELECT id FROM @t;`, nv(refsJSON(refs)))
}

// moved is the table variable DeadLetter and DeadLetterExpired delete
// into, and the INSERT that copies it to the error table. Two statements
// rather than DELETE … OUTPUT … INTO the error table directly: an OUTPUT
// INTO target may not have triggers, foreign keys or check constraints,
// and a table variable has none. XACT_ABORT and the explicit transaction
// make the pair atomic on its own; inside the engine's transaction it
// simply nests.
const deadLetterVar = `DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NOT NULL, body varbinary(max) NOT NULL, attempts int NOT NULL, created_at datetime2(3) NOT NULL);
`

func copyToErrors(errors, queueParam, reasonParam string) string {
	return `INSERT INTO ` + errors + ` (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at, failed_at)
SELECT ` + queueParam + `, uuid, headers, body, attempts, ` + reasonParam + `, id, created_at, @now FROM @t ORDER BY id;
COMMIT TRANSACTION;
SELECT id FROM @t;`
}

// DeadLetter implements sqlqueue.Dialect: one batch, atomic on its own.
// Its WHERE names the primary key with a parameter, so its plan is a
// seek of the clustered key whatever the table held at compile time; and,
// as a settlement, it waits for a lock on its row rather than skip it (no
// READPAST, see settledHints).
func (Dialect) DeadLetter(n sqlqueue.Names, q sqlqueue.Queue, ref sqlqueue.Ref, reason string) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{st(headLocking+`SET XACT_ABORT ON;
`+deadLetterVar+`BEGIN TRANSACTION;
DELETE FROM `+q.Table+` WITH (ROWLOCK)
OUTPUT deleted.id, deleted.uuid, deleted.headers, deleted.body, deleted.attempts, deleted.created_at INTO @t
WHERE id = @p1 AND owner = @p2 AND state IN (1, 2);
`+copyToErrors(n.Errors, "@p3", "@p4"), ref.ID, ref.Owner, nv(q.Name), nv(reason))}
}

// sweepHints are the queue table's hints in Recover, DeadLetterExpired
// and DropExpired, after the index each seeks: INDEX and FORCESEEK pin a
// seek of that filtered index on its key (lease_until, expires_at) up to
// @now, whatever the plan cached from a compile on an empty table would
// otherwise do (a clustered scan, every row read under UPDLOCK); UPDLOCK
// so that the rows it qualifies stay as read until it changes them;
// READPAST so that a sweep passes the rows a claim, a settlement or
// another sweep holds (the row is swept next time, if it still needs it);
// ROWLOCK and READCOMMITTEDLOCK as in Claim. A DML statement's target
// takes neither INDEX nor FORCESEEK, so the table is named in its FROM,
// where every table hint is allowed.
func sweepHints(index string) string {
	return ` WITH (INDEX(` + Dialect{}.QuoteIdent(index) + `), FORCESEEK, UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)`
}

// Recover implements sqlqueue.Dialect. "state > 0" repeats the lease
// index's filter so the optimizer can match it, and the plan seeks that
// index (sweepHints). maxAttempts <= 0 (retry forever) is sent as the
// largest int.
func (Dialect) Recover(q sqlqueue.Queue, maxAttempts, limit int) sqlqueue.Stmt {
	return st(headLocking+`DECLARE @t TABLE (id bigint NOT NULL);
UPDATE TOP (@p1) q SET state = 0, owner = NULL, lease_until = NULL
OUTPUT inserted.id INTO @t
FROM `+q.Table+` AS q`+sweepHints(q.Name+"_leased")+`
WHERE q.state > 0 AND q.lease_until <= @now AND (q.state = 1 OR q.attempts < @p2);
SELECT id FROM @t;`, int64(limit), attemptsCap(maxAttempts))
}

func attemptsCap(maxAttempts int) int64 {
	if maxAttempts <= 0 || maxAttempts > math.MaxInt32 {
		return math.MaxInt32
	}
	return int64(maxAttempts)
}

// DeadLetterExpired implements sqlqueue.Dialect: one batch, atomic on its
// own (see DeadLetter), seeking the lease index (sweepHints).
func (Dialect) DeadLetterExpired(n sqlqueue.Names, q sqlqueue.Queue, maxAttempts int, reason string, limit int) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{st(headLocking+`SET XACT_ABORT ON;
`+deadLetterVar+`BEGIN TRANSACTION;
DELETE TOP (@p1) q
OUTPUT deleted.id, deleted.uuid, deleted.headers, deleted.body, deleted.attempts, deleted.created_at INTO @t
FROM `+q.Table+` AS q`+sweepHints(q.Name+"_leased")+`
WHERE q.state > 0 AND q.lease_until <= @now AND q.state = 2 AND q.attempts >= @p2;
`+copyToErrors(n.Errors, "@p3", "@p4"), int64(limit), attemptsCap(maxAttempts), nv(q.Name), nv(reason))}
}

// DropExpired implements sqlqueue.Dialect. Its predicate matches the
// expiry index's filter, and the plan seeks that index (sweepHints): the
// pending rows that have a time-to-live, never the backlog.
func (Dialect) DropExpired(q sqlqueue.Queue, limit int) sqlqueue.Stmt {
	return st(headLocking+`DECLARE @t TABLE (id bigint NOT NULL);
DELETE TOP (@p1) q
OUTPUT deleted.id INTO @t
FROM `+q.Table+` AS q`+sweepHints(q.Name+"_expiry")+`
WHERE q.state = 0 AND q.expires_at IS NOT NULL AND q.expires_at <= @now;
SELECT id FROM @t;`, int64(limit))
}

// SplitSweep implements sqlqueue.SweepSplitter: true. Each statement of a
// sweep (DeadLetterStray, Recover, DeadLetterExpired, DropExpired) commits
// in a transaction of its own, which takes the sweep lock again, so that
// the rows one statement locks are released when it ends rather than held
// while the next ones run: a claim or a settlement waits behind a sweep
// for one statement at most.
func (Dialect) SplitSweep() bool { return true }

// sessionQuery reads what Check verifies, for this session and database.
// sys.dm_exec_sessions always shows a session its own row, and
// sys.databases a database its own; no VIEW SERVER STATE is needed.
const sessionQuery = `SET NOCOUNT ON;
SELECT s.transaction_isolation_level, d.compatibility_level,
	CAST(SESSIONPROPERTY('ANSI_NULLS') AS int), CAST(SESSIONPROPERTY('ANSI_PADDING') AS int),
	CAST(SESSIONPROPERTY('ANSI_WARNINGS') AS int), CAST(SESSIONPROPERTY('CONCAT_NULL_YIELDS_NULL') AS int),
	CAST(SESSIONPROPERTY('QUOTED_IDENTIFIER') AS int), CAST(SESSIONPROPERTY('NUMERIC_ROUNDABORT') AS int)
FROM sys.dm_exec_sessions AS s CROSS JOIN sys.databases AS d
WHERE s.session_id = @@SPID AND d.database_id = DB_ID();`

// ErrUnsupportedSession is returned (wrapped) by Check when the database
// or session cannot run the transport safely; the message says what to
// change.
var ErrUnsupportedSession = errors.New("sqlserver: unsupported session")

// SessionState is what Check reads from the server.
type SessionState struct {
	// IsolationLevel is sys.dm_exec_sessions.transaction_isolation_level:
	// 1 READ UNCOMMITTED, 2 READ COMMITTED, 3 REPEATABLE READ,
	// 4 SERIALIZABLE, 5 SNAPSHOT.
	IsolationLevel int
	// CompatibilityLevel is the database's compatibility level.
	CompatibilityLevel int
	// The SET options that filtered indexes need (1 = ON).
	AnsiNulls, AnsiPadding, AnsiWarnings, ConcatNullYieldsNull, QuotedIdentifier, NumericRoundAbort int
}

// Check implements sqlqueue.SessionChecker: it reads the session's
// isolation level, the database's compatibility level and the SET options
// that DML on a table with a filtered index requires, and reports every
// problem at once.
func (Dialect) Check(ctx context.Context, db *sql.DB) error {
	var s SessionState
	err := db.QueryRowContext(ctx, sessionQuery).Scan(&s.IsolationLevel, &s.CompatibilityLevel,
		&s.AnsiNulls, &s.AnsiPadding, &s.AnsiWarnings, &s.ConcatNullYieldsNull, &s.QuotedIdentifier, &s.NumericRoundAbort)
	if err != nil {
		return fmt.Errorf("sqlserver: read session state: %w", err)
	}
	return s.Validate()
}

// Validate reports every reason the session cannot run the transport,
// wrapped in ErrUnsupportedSession, or nil.
func (s SessionState) Validate() error {
	var errs []error
	switch s.IsolationLevel {
	case 5:
		errs = append(errs, errors.New("the session runs at SNAPSHOT isolation: claims would read row versions and could hand one row to two instances; use READ COMMITTED (READ_COMMITTED_SNAPSHOT on the database is fine)"))
	case 1, 4:
		errs = append(errs, fmt.Errorf("the session runs at %s isolation: READPAST claims need READ COMMITTED or REPEATABLE READ", isolationName(s.IsolationLevel)))
	}
	if s.CompatibilityLevel < MinCompatibilityLevel {
		errs = append(errs, fmt.Errorf("the database's compatibility level is %d: OPENJSON needs %d (SQL Server 2016) or higher; ALTER DATABASE … SET COMPATIBILITY_LEVEL = %d",
			s.CompatibilityLevel, MinCompatibilityLevel, MinCompatibilityLevel))
	}
	on := []struct {
		name string
		v    int
	}{{"ANSI_NULLS", s.AnsiNulls}, {"ANSI_PADDING", s.AnsiPadding}, {"ANSI_WARNINGS", s.AnsiWarnings},
		{"CONCAT_NULL_YIELDS_NULL", s.ConcatNullYieldsNull}, {"QUOTED_IDENTIFIER", s.QuotedIdentifier}}
	for _, o := range on {
		if o.v != 1 {
			errs = append(errs, fmt.Errorf("SET %s is OFF: writes to tables with filtered indexes fail (error 1934); it must be ON", o.name))
		}
	}
	if s.NumericRoundAbort != 0 {
		errs = append(errs, errors.New("SET NUMERIC_ROUNDABORT is ON: writes to tables with filtered indexes fail (error 1934); it must be OFF"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrUnsupportedSession, errors.Join(errs...))
	}
	return nil
}

func isolationName(l int) string {
	switch l {
	case 1:
		return "READ UNCOMMITTED"
	case 2:
		return "READ COMMITTED"
	case 3:
		return "REPEATABLE READ"
	case 4:
		return "SERIALIZABLE"
	case 5:
		return "SNAPSHOT"
	}
	return "unspecified (" + strconv.Itoa(l) + ")"
}

// IsMissingTable implements sqlqueue.MissingTableClassifier: error 208,
// "Invalid object name".
func (Dialect) IsMissingTable(err error) bool {
	var e mssql.Error
	return errors.As(err, &e) && e.Number == 208
}

// SharedLock implements sqlqueue.ParkingDialect: Lock's application lock
// (the same resource) in shared mode, its wait bounded by LockTimeout as
// Lock's.
func (Dialect) SharedLock(key string) sqlqueue.Stmt {
	return st(lockWait("Shared"), nv(key))
}

// Register implements sqlqueue.ParkingDialect.
func (Dialect) Register(n sqlqueue.Names, q sqlqueue.Queue) sqlqueue.Stmt {
	return st(head+`DECLARE @copy int = 0;
IF NOT EXISTS (SELECT 1 FROM `+n.Subscriptions+` WITH (UPDLOCK, HOLDLOCK) WHERE topic = @p1 AND consumer_group = @p2)
BEGIN
	INSERT INTO `+n.Subscriptions+` (topic, consumer_group, queue_table) VALUES (@p1, @p2, @p3);
	IF NOT EXISTS (SELECT 1 FROM `+n.Subscriptions+` WHERE topic = @p1 AND consumer_group = N'') SET @copy = 1;
END
SELECT @copy;`,
		nv(q.Topic), nv(q.Group), nv(q.Name))
}

// CopyParked implements sqlqueue.ParkingDialect.
func (Dialect) CopyParked(from, to sqlqueue.Queue) sqlqueue.Stmt {
	return st(headNow + `INSERT INTO ` + to.Table + ` (uuid, headers, body, created_at, due_at, expires_at, ordering_key)
SELECT uuid, headers, body, created_at, due_at, expires_at, ordering_key FROM ` + from.Table + `
WHERE state = 0 AND (expires_at IS NULL OR expires_at > @now)
ORDER BY id;`)
}

// PruneParked implements sqlqueue.ParkingDialect: the limit oldest rows by
// primary key, of which those pending and past the retention go.
func (Dialect) PruneParked(n sqlqueue.Names, q sqlqueue.Queue, retention time.Duration, limit int) sqlqueue.Stmt {
	return st(headLocking+`DECLARE @t TABLE (id bigint NOT NULL);
DECLARE @before datetime2(3) = DATEADD(millisecond, -CAST(@p2 % 1000 AS int), DATEADD(second, -CAST(@p2 / 1000 AS int), @now));
IF NOT EXISTS (SELECT 1 FROM `+n.Subscriptions+` WHERE topic = @p3 AND consumer_group = N'')
DELETE FROM `+q.Table+` WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
OUTPUT deleted.id INTO @t
WHERE id IN (SELECT TOP (@p1) id FROM `+q.Table+` WITH (READPAST, READCOMMITTEDLOCK) ORDER BY id)
	AND state = 0 AND created_at < @before;
SELECT id FROM @t;`, int64(limit), ms(retention), nv(q.Topic))
}
