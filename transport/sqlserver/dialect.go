package sqlserver

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/berth-go/berth/transport/sqlqueue"
)

// Limits of the T-SQL dialect.
const (
	// MaxParams is the most parameters one statement binds. SQL Server
	// accepts 2,100 per RPC request, and go-mssqldb sends a parameterised
	// statement as sp_executesql, whose own @stmt and @params take two of
	// them.
	MaxParams = 2100 - 2
	// MaxRowsPerInsert is how many rows one INSERT carries: five
	// parameters per row (uuid, headers, body, delay, time-to-live) within
	// MaxParams. A table value constructor allows 1,000 rows; this is less.
	MaxRowsPerInsert = MaxParams / insertParams
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
)

const insertParams = 5

// Dialect is the SQL Server (T-SQL) dialect: every statement of the
// transport on SQL Server is in this file. It implements
// sqlqueue.Dialect, sqlqueue.SessionChecker and
// sqlqueue.MissingTableClassifier. The zero value is ready to use.
//
// Statements with arguments reach the server through sp_executesql with
// positional parameters @p1, @p2, … (go-mssqldb names the i-th argument
// @p<i>), so their text is constant for a given shape and SQL Server
// caches one plan per statement.
type Dialect struct{}

var (
	_ sqlqueue.Dialect                = Dialect{}
	_ sqlqueue.SessionChecker         = Dialect{}
	_ sqlqueue.MissingTableClassifier = Dialect{}
)

func st(sql string, args ...any) sqlqueue.Stmt { return sqlqueue.Stmt{SQL: sql, Args: args} }

// Name implements sqlqueue.Dialect.
func (Dialect) Name() string { return "sqlserver" }

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
const (
	head    = "SET NOCOUNT ON;\n"
	headNow = head + "DECLARE @now datetime2(3) = SYSUTCDATETIME();\n"
)

// Lock implements sqlqueue.Dialect with sp_getapplock owned by the
// transaction: released at commit or rollback. Keys longer than
// sp_getapplock's 255 characters are shortened with a hash.
func (Dialect) Lock(key string, wait bool) sqlqueue.Stmt {
	timeout := "0"
	if wait {
		timeout = "-1"
	}
	return st(head+`DECLARE @r int;
EXEC @r = sp_getapplock @Resource = @p1, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = `+timeout+`;
SELECT CASE WHEN @r >= 0 THEN 1 ELSE 0 END;`, lockKey(key))
}

func lockKey(key string) string {
	k := "berth:" + key
	if len(k) <= maxLockKey {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	h := hex.EncodeToString(sum[:16])
	return k[:maxLockKey-len(h)-1] + ":" + h
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
		st(head + `IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(` + literal(n.Errors) + `) AND name = ` + literal(errIdx) + `)
CREATE INDEX ` + d.QuoteIdent(errIdx) + ` ON ` + n.Errors + ` (queue_table, failed_at)`),
	}}}
}

// CreateQueue implements sqlqueue.Dialect. The filtered index on pending
// rows is the claim path: a claimed row leaves it, so concurrent claims
// never scan past other instances' claimed rows. The second filtered index
// serves the sweeper. The primary key is left unnamed: constraint names
// share a namespace with table names in a schema.
func (d Dialect) CreateQueue(q sqlqueue.Queue) []sqlqueue.Stmt {
	pending, leased := q.Name+"_pending", q.Name+"_leased"
	return []sqlqueue.Stmt{
		st(head + `IF OBJECT_ID(` + literal(q.Table) + `, N'U') IS NULL
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
	expires_at  datetime2(3)   NULL
)`),
		st(head + `IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(` + literal(q.Table) + `) AND name = ` + literal(pending) + `)
CREATE INDEX ` + d.QuoteIdent(pending) + ` ON ` + q.Table + ` (due_at, id) INCLUDE (expires_at) WHERE state = 0`),
		st(head + `IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(` + literal(q.Table) + `) AND name = ` + literal(leased) + `)
CREATE INDEX ` + d.QuoteIdent(leased) + ` ON ` + q.Table + ` (lease_until) INCLUDE (attempts) WHERE state > 0`),
	}
}

// Subscribe implements sqlqueue.Dialect: insert-if-missing under a
// key-range lock (UPDLOCK, HOLDLOCK), so concurrent subscribers of the same
// pair neither both insert nor fail on the primary key.
func (Dialect) Subscribe(n sqlqueue.Names, q sqlqueue.Queue) sqlqueue.Stmt {
	return st(head+`IF NOT EXISTS (SELECT 1 FROM `+n.Subscriptions+` WITH (UPDLOCK, HOLDLOCK) WHERE topic = @p1 AND consumer_group = @p2)
INSERT INTO `+n.Subscriptions+` (topic, consumer_group, queue_table) VALUES (@p1, @p2, @p3);`,
		q.Topic, q.Group, q.Name)
}

// Subscriptions implements sqlqueue.Dialect.
func (Dialect) Subscriptions(n sqlqueue.Names, topic string) sqlqueue.Stmt {
	return st(head+`SELECT queue_table FROM `+n.Subscriptions+` WHERE topic = @p1 ORDER BY consumer_group;`, topic)
}

// Insert implements sqlqueue.Dialect: one INSERT … SELECT from a table
// value constructor per MaxRowsPerInsert rows. The row number n orders the
// SELECT, so identity values (and so delivery order) follow the order of
// rows; due and expiry times are computed once, on the server's clock.
func (Dialect) Insert(q sqlqueue.Queue, rows []sqlqueue.InsertRow) []sqlqueue.Stmt {
	var out []sqlqueue.Stmt
	for start := 0; start < len(rows); start += MaxRowsPerInsert {
		chunk := rows[start:min(start+MaxRowsPerInsert, len(rows))]
		var b strings.Builder
		b.WriteString(headNow)
		b.WriteString("INSERT INTO " + q.Table + " (uuid, headers, body, due_at, expires_at)\n")
		b.WriteString("SELECT v.uuid, v.headers, v.body, " + after("v.delay_ms") + ",\n")
		b.WriteString("\tCASE WHEN v.ttl_ms > 0 THEN " + after("v.ttl_ms") + " END\n")
		b.WriteString("FROM (VALUES")
		args := make([]any, 0, len(chunk)*insertParams)
		for i, r := range chunk {
			if i > 0 {
				b.WriteByte(',')
			}
			p := len(args)
			fmt.Fprintf(&b, "\n\t(%d, @p%d, @p%d, @p%d, @p%d, @p%d)", i+1, p+1, p+2, p+3, p+4, p+5)
			body := r.Body
			if body == nil {
				body = []byte{} // nil would bind NULL
			}
			args = append(args, r.UUID, string(r.Headers), body, ms(r.Delay), ms(r.TTL))
		}
		b.WriteString("\n) AS v (n, uuid, headers, body, delay_ms, ttl_ms)\nORDER BY v.n;")
		out = append(out, st(b.String(), args...))
	}
	return out
}

// Claim implements sqlqueue.Dialect. The CTE picks the n oldest due
// pending rows through the filtered index; UPDLOCK takes them for this
// statement, READPAST skips rows other claims hold instead of waiting,
// ROWLOCK keeps the locks narrow and READCOMMITTEDLOCK makes the read a
// locking one even where READ_COMMITTED_SNAPSHOT is on (a versioned read
// could hand the same row to two claims). Rows come back through OUTPUT …
// INTO a table variable, which works on tables with triggers.
func (Dialect) Claim(q sqlqueue.Queue, owner int64, n int, fetchTimeout time.Duration) sqlqueue.Stmt {
	return st(headNow+`DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NOT NULL, body varbinary(max) NOT NULL, attempts int NOT NULL);
WITH c AS (
	SELECT TOP (@p1) id, uuid, headers, body, attempts, state, owner, lease_until
	FROM `+q.Table+` WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
	WHERE state = 0 AND due_at <= @now AND (expires_at IS NULL OR expires_at > @now)
	ORDER BY due_at, id
)
UPDATE c SET state = 1, owner = @p2, lease_until = `+after("@p3")+`
OUTPUT inserted.id, inserted.uuid, inserted.headers, inserted.body, inserted.attempts INTO @t;
SELECT id, uuid, headers, body, attempts FROM @t;`,
		int64(n), owner, ms(fetchTimeout))
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

// Begin implements sqlqueue.Dialect.
func (Dialect) Begin(q sqlqueue.Queue, refs []sqlqueue.Ref, lease time.Duration) sqlqueue.Stmt {
	return st(headNow+`DECLARE @t TABLE (id bigint NOT NULL, attempts int NOT NULL);
UPDATE q SET state = 2, attempts = q.attempts + 1, lease_until = `+after("@p2")+`
OUTPUT inserted.id, inserted.attempts INTO @t
FROM `+q.Table+` AS q WITH (ROWLOCK)
INNER JOIN `+refsTable+`
WHERE q.state = 1;
SELECT id, attempts FROM @t;`, refsJSON(refs), ms(lease))
}

// Complete implements sqlqueue.Dialect.
func (Dialect) Complete(q sqlqueue.Queue, refs []sqlqueue.Ref) sqlqueue.Stmt {
	return st(head+`DECLARE @t TABLE (id bigint NOT NULL);
DELETE q
OUTPUT deleted.id INTO @t
FROM `+q.Table+` AS q WITH (ROWLOCK)
INNER JOIN `+refsTable+`
WHERE q.state = 2;
SELECT id FROM @t;`, refsJSON(refs))
}

// Renew implements sqlqueue.Dialect.
func (Dialect) Renew(q sqlqueue.Queue, refs []sqlqueue.Ref, lease time.Duration) sqlqueue.Stmt {
	return st(headNow+`DECLARE @t TABLE (id bigint NOT NULL);
UPDATE q SET lease_until = `+after("@p2")+`
OUTPUT inserted.id INTO @t
FROM `+q.Table+` AS q WITH (ROWLOCK)
INNER JOIN `+refsTable+`
WHERE q.state = 2;
SELECT id FROM @t;`, refsJSON(refs), ms(lease))
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
		b = append(b, '}')
	}
	b = append(b, ']')
	return st(headNow+`DECLARE @t TABLE (id bigint NOT NULL);
UPDATE q SET state = 0, owner = NULL, lease_until = NULL, due_at = `+after("r.delay_ms")+`
OUTPUT inserted.id INTO @t
FROM `+q.Table+` AS q WITH (ROWLOCK)
INNER JOIN OPENJSON(@p1) WITH (id bigint '$.id', owner bigint '$.owner', delay_ms bigint '$.delay_ms') AS r ON q.id = r.id AND q.owner = r.owner
WHERE q.state = 2;
SELECT id FROM @t;`, string(b))
}

// Release implements sqlqueue.Dialect.
func (Dialect) Release(q sqlqueue.Queue, refs []sqlqueue.Ref) sqlqueue.Stmt {
	return st(head+`DECLARE @t TABLE (id bigint NOT NULL);
UPDATE q SET state = 0, owner = NULL, lease_until = NULL
OUTPUT inserted.id INTO @t
FROM `+q.Table+` AS q WITH (ROWLOCK)
INNER JOIN `+refsTable+`
WHERE q.state = 1;
SELECT id FROM @t;`, refsJSON(refs))
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
func (Dialect) DeadLetter(n sqlqueue.Names, q sqlqueue.Queue, ref sqlqueue.Ref, reason string) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{st(headNow+`SET XACT_ABORT ON;
`+deadLetterVar+`BEGIN TRANSACTION;
DELETE FROM `+q.Table+` WITH (ROWLOCK)
OUTPUT deleted.id, deleted.uuid, deleted.headers, deleted.body, deleted.attempts, deleted.created_at INTO @t
WHERE id = @p1 AND owner = @p2 AND state IN (1, 2);
`+copyToErrors(n.Errors, "@p3", "@p4"), ref.ID, ref.Owner, q.Name, reason)}
}

// Recover implements sqlqueue.Dialect. "state > 0" repeats the lease
// index's filter so the optimizer can match it. maxAttempts <= 0 (retry
// forever) is sent as the largest int.
func (Dialect) Recover(q sqlqueue.Queue, maxAttempts, limit int) sqlqueue.Stmt {
	return st(headNow+`DECLARE @t TABLE (id bigint NOT NULL);
UPDATE TOP (@p1) `+q.Table+` WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
SET state = 0, owner = NULL, lease_until = NULL
OUTPUT inserted.id INTO @t
WHERE state > 0 AND lease_until <= @now AND (state = 1 OR attempts < @p2);
SELECT id FROM @t;`, int64(limit), attemptsCap(maxAttempts))
}

func attemptsCap(maxAttempts int) int64 {
	if maxAttempts <= 0 || maxAttempts > math.MaxInt32 {
		return math.MaxInt32
	}
	return int64(maxAttempts)
}

// DeadLetterExpired implements sqlqueue.Dialect: one batch, atomic on its
// own (see DeadLetter).
func (Dialect) DeadLetterExpired(n sqlqueue.Names, q sqlqueue.Queue, maxAttempts int, reason string, limit int) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{st(headNow+`SET XACT_ABORT ON;
`+deadLetterVar+`BEGIN TRANSACTION;
DELETE TOP (@p1) FROM `+q.Table+` WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
OUTPUT deleted.id, deleted.uuid, deleted.headers, deleted.body, deleted.attempts, deleted.created_at INTO @t
WHERE state > 0 AND lease_until <= @now AND state = 2 AND attempts >= @p2;
`+copyToErrors(n.Errors, "@p3", "@p4"), int64(limit), attemptsCap(maxAttempts), q.Name, reason)}
}

// DropExpired implements sqlqueue.Dialect.
func (Dialect) DropExpired(q sqlqueue.Queue, limit int) sqlqueue.Stmt {
	return st(headNow+`DECLARE @t TABLE (id bigint NOT NULL);
DELETE TOP (@p1) FROM `+q.Table+` WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
OUTPUT deleted.id INTO @t
WHERE state = 0 AND expires_at <= @now;
SELECT id FROM @t;`, int64(limit))
}

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
