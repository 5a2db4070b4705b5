package sqlqueue

import (
	"context"
	"database/sql"
	"time"
)

// Row states stored in a queue table's state column.
const (
	// StatePending: waiting to be claimed once due_at has passed.
	StatePending = 0
	// StateFetched: claimed by owner, waiting in a subscriber's buffer;
	// lease_until is the fetch timeout.
	StateFetched = 1
	// StateProcessing: handed to user code by owner; attempts counts this
	// attempt and lease_until is the processing lease.
	StateProcessing = 2
)

// A Dialect holds every statement of one database, in one place. The engine
// (this package) decides what runs when, inside which transaction, and how
// results are fenced; the dialect only writes SQL text and encodes
// arguments. Dialects are stateless and safe for concurrent use.
//
// # The table schema a dialect creates
//
// One queue table per (topic, consumer group), named by the engine (see
// [QueueTableName]), with these columns (types are the dialect's):
//
//	id          bigint identity, primary key (insertion order)
//	uuid        the Watermill message UUID (text)
//	headers     the message metadata as a JSON object (text)
//	body        the payload (binary)
//	state       small integer: StatePending, StateFetched, StateProcessing
//	owner       bigint claim token; NULL while pending
//	attempts    integer, starts at 0, +1 at Begin, or in ClaimDirect for a row
//	            claimed straight into processing (never for a fetched row)
//	created_at  time of insert
//	due_at      the row may be claimed once due_at <= now
//	lease_until fetch timeout (fetched) or processing lease (processing); NULL while pending
//	expires_at  optional time-to-live; NULL means never
//	ordering_key the message's ordering key (transport.MetadataOrderingKey);
//	            NULL when it has none
//
// with a filtered/partial index on (due_at, id) over pending rows only, so
// claimed rows leave the claim path, one on lease_until over non-pending
// rows for the sweeper, and one on (ordering_key, id) over keyed rows, so
// that a claim finds whether a keyed row is the head of its key with one
// seek (see Claim). Shared tables: the subscriptions table (topic,
// consumer_group, queue_table, created_at; primary key topic +
// consumer_group), the error table (id, queue_table, message_uuid, headers,
// body, attempts, reason, original_id, created_at, failed_at) and the schema
// version table (version, applied_at).
//
// Time is the database's: every "now" in a statement is the server clock, and
// durations are passed as arguments (whole milliseconds), so instances with
// skewed clocks agree on due times and leases.
//
// # Statement contracts
//
// Statements that return rows may spread them over several result sets (a
// T-SQL batch with SET NOCOUNT ON and OUTPUT … INTO a table variable, then a
// SELECT): the engine reads every result set and concatenates their rows, so
// a dialect can emit its output wherever its database needs it. Every
// follow-up statement (Begin, Complete, Renew, Retry, Release, DeadLetter)
// must be fenced: it touches a row only when both id and owner match the
// given Ref and the row is in the expected state, and it returns exactly the
// ids it touched. Refs absent from the result are reported as
// transport.ErrLeaseLost. The engine never relies on a driver's
// RowsAffected.
//
// Methods returning []Stmt are run in order inside one transaction; the
// rows of the last statement are the result.
type Dialect interface {
	// Name is the dialect's short name ("postgres", "sqlite", "sqlserver"),
	// used in logs and errors, and in the messaging.system of its queues
	// (see MessagingSystem).
	Name() string

	// QuoteIdent quotes one identifier (a schema, table or index name).
	QuoteIdent(name string) string

	// Lock returns a statement, run inside a transaction, that takes the
	// cluster-wide exclusive lock key for the rest of that transaction
	// (pg_advisory_xact_lock, sp_getapplock with @LockOwner='Transaction').
	// With wait false it must not wait (zero lock timeout). It returns one
	// row with one column: non-zero/true when the lock was acquired. A
	// database whose transactions are already exclusive (SQLite's BEGIN
	// IMMEDIATE) may return a statement selecting 1.
	Lock(key string, wait bool) Stmt

	// VersionTable returns idempotent DDL creating the schema version
	// table; run under the schema lock before SchemaVersion.
	VersionTable(n Names) []Stmt
	// SchemaVersion returns one row with one integer: the highest applied
	// schema version, 0 when none.
	SchemaVersion(n Names) Stmt
	// Migrations returns the shared-table DDL by version, ascending. Each
	// migration's statements must be idempotent. The engine applies those
	// newer than SchemaVersion under the schema lock, then records the last
	// one with SetSchemaVersion.
	Migrations(n Names) []Migration
	// SetSchemaVersion records version v as applied.
	SetSchemaVersion(n Names, v int) Stmt

	// CreateQueue returns idempotent DDL creating q's table and indexes.
	CreateQueue(q Queue) []Stmt
	// Subscribe returns an idempotent statement recording q in the
	// subscriptions table (topic, consumer group, queue table name).
	Subscribe(n Names, q Queue) Stmt
	// Subscriptions returns a statement selecting the unquoted queue table
	// names (one column) subscribed to topic.
	Subscriptions(n Names, topic string) Stmt

	// Insert returns the statements inserting rows into q, as few as the
	// database's parameter limit allows (one when it fits). A dialect with
	// server-side wake-ups (NOTIFY) includes the notification here. They
	// return no rows.
	Insert(q Queue, rows []InsertRow) []Stmt

	// Claim claims at most n pending rows whose due_at has passed and whose
	// expires_at (if any) has not, skipping rows locked by concurrent claims
	// (SKIP LOCKED, READPAST), oldest due first. A row with an ordering key
	// is claimed only when it is the head of its key — no other row of the
	// table has the same key and a lower id, whatever that row's state — so
	// at most one row per key is ever fetched or processing, across every
	// claimer, and a key's rows are claimed in id order. Claimed: state becomes
	// StateFetched, owner becomes owner, lease_until becomes now +
	// fetchTimeout. It returns the claimed rows with the columns id, uuid,
	// headers, body, attempts in that order, in any row order.
	Claim(q Queue, owner int64, n int, fetchTimeout time.Duration) Stmt

	// Begin is the lease gate: fenced on StateFetched, it sets
	// StateProcessing, attempts = attempts + 1 and lease_until = now +
	// lease. It returns id, attempts of the rows it touched.
	Begin(q Queue, refs []Ref, lease time.Duration) Stmt
	// Complete deletes the rows, fenced on StateProcessing. Returns ids.
	Complete(q Queue, refs []Ref) Stmt
	// Renew sets lease_until = now + lease, fenced on StateProcessing.
	// Returns ids.
	Renew(q Queue, refs []Ref, lease time.Duration) Stmt
	// Retry returns rows to StatePending with due_at = now + each row's
	// delay, owner and lease_until cleared, attempts unchanged, each row's
	// Line appended to its headers (see RetryRef), fenced on
	// StateProcessing. Returns ids.
	Retry(q Queue, rows []RetryRef) Stmt
	// Release returns rows to StatePending (owner and lease_until cleared;
	// attempts and due_at unchanged), fenced on StateFetched. Returns ids.
	Release(q Queue, refs []Ref) Stmt
	// DeadLetter moves one row, fenced on StateFetched or StateProcessing,
	// into the error table with reason (attempts, headers, body, uuid,
	// original id and created_at copied from the row) and deletes it, in
	// one transaction. The last statement returns the id when it moved.
	DeadLetter(n Names, q Queue, ref Ref, reason string) []Stmt

	// Recover returns rows whose lease_until has passed to StatePending
	// (owner and lease_until cleared, attempts unchanged): every fetched
	// row, and processing rows with attempts < maxAttempts (all of them
	// when maxAttempts <= 0). At most limit rows; one result row per row
	// recovered (any columns).
	Recover(q Queue, maxAttempts, limit int) Stmt
	// DeadLetterExpired moves processing rows whose lease_until has passed
	// and whose attempts >= maxAttempts (maxAttempts > 0) to the error
	// table with reason, at most limit rows; the last statement returns one
	// row per row moved.
	DeadLetterExpired(n Names, q Queue, maxAttempts int, reason string, limit int) []Stmt
	// DeadLetterStray moves the rows no other statement would ever touch —
	// a leased state (StateFetched, StateProcessing) with a NULL
	// lease_until, a NULL owner, or (SQLite) a lease_until that is not an
	// integer, or a state other than StatePending, StateFetched and
	// StateProcessing, as another tool or a bad migration may write them —
	// to the error table, at most limit rows, atomically (the whole move
	// or nothing). Each row's reason is computed in SQL: "stray row: state
	// <s> is not a known state" for an unknown state, else "stray row:
	// state <s> with no lease", "… with a lease that is not a time" or
	// "… with no owner". The last statement returns
	// one row per row moved. Its predicate should be one the index over
	// non-pending rows (see CreateQueue) can serve, so that a sweep does
	// not read the pending backlog.
	DeadLetterStray(n Names, q Queue, limit int) []Stmt
	// DropExpired deletes pending rows whose expires_at has passed, at most
	// limit; one result row per row dropped.
	DropExpired(q Queue, limit int) Stmt
}

// DirectDialect is implemented by dialects that can claim rows straight
// into processing (see transport.DirectClaimer). The engine uses ClaimDirect
// instead of Claim when the receive loop has free permits for some of the
// rows it claims; a dialect without it claims every row fetched, and each
// passes Begin.
type DirectDialect interface {
	// ClaimDirect is Claim, except that the first direct rows in claim
	// order (oldest due first; direct ≤ n) are claimed as Claim then Begin
	// would leave them: StateProcessing, owner, attempts = attempts + 1,
	// lease_until = now + lease. The others are claimed as by Claim
	// (StateFetched, lease_until = now + fetchTimeout). It returns the
	// columns id, uuid, headers, body, attempts, state in that order.
	ClaimDirect(q Queue, owner int64, n, direct int, fetchTimeout, lease time.Duration) Stmt
	// ReleaseDirect returns rows that ClaimDirect claimed into processing
	// and that never reached user code to StatePending: attempts =
	// attempts - 1 (the claim's count undone), owner and lease_until
	// cleared, due_at unchanged, fenced on StateProcessing. Returns ids.
	ReleaseDirect(q Queue, refs []Ref) Stmt
}

// Notifier is implemented by dialects whose database pushes wake-ups
// (PostgreSQL LISTEN/NOTIFY). The engine gives it one dedicated connection
// per pool.
type Notifier interface {
	// Listen subscribes conn to the wake-ups that Insert statements send
	// and serves s on it until ctx is done or the connection fails: before
	// each wait for a notification it calls s.Elect with a LeadFunc running
	// on conn, and waits within the context Elect returns (that context
	// ending is no error: Listen calls Elect again); it calls s.Wake with
	// the unquoted queue table name of each notification received. It
	// returns ctx.Err() or the connection error; the engine reconnects with
	// backoff.
	Listen(ctx context.Context, conn *sql.Conn, s *WakeSession) error
}

// MultiProber is implemented by dialects that can look at many queues in
// one statement. The engine then runs one probe per pool on an interval for
// every queue whose sources are idle, instead of one claim per source per
// empty delay (see the package documentation, Idle).
type MultiProber interface {
	// MultiProbe returns one read-only statement over qs (one or more
	// queues) answering one row per queue, in any order, with the
	// columns: the unquoted queue table name (Queue.Name); ready, true
	// when a pending row is due and not expired; next_ms, the whole
	// milliseconds (rounded up) from now until the earliest pending row
	// that is not due yet falls due, NULL when there is none; empty, true
	// when the table has no row at all. Each check must be an index seek
	// (the pending index, the primary key) that returns at most one row,
	// and must not wait for rows locked by other transactions.
	MultiProbe(qs []Queue) Stmt
}

// LeadFunc takes (without waiting) the wake-up leadership of every queue
// table in take and gives up that of every table in give, in one round
// trip on the LISTEN connection, as session-level locks that the database
// drops with the session, and reports which tables of take the connection
// holds afterwards. One call serves a whole election pass of the pool,
// whatever its number of queues.
type LeadFunc func(ctx context.Context, take, give []string) (held map[string]bool, err error)

// QueueChecker is implemented by dialects whose idempotent DDL takes locks
// even when there is nothing to create (PostgreSQL: CREATE INDEX IF NOT
// EXISTS takes a SHARE lock on the table first, which waits for every
// writer and holds the queue's claims, settlements and inserts behind it
// until the transaction ends — at every subscriber start). The engine runs
// QueueExists first, without the schema lock, and skips the DDL when the
// queue's table and indexes are all there.
type QueueChecker interface {
	// QueueExists returns a statement answering one row with one boolean.
	QueueExists(q Queue) Stmt
}

// SessionChecker is implemented by dialects that must verify the database
// or session before use (SQL Server: reject SNAPSHOT isolation). The
// engine calls Check once when a publisher or subscriber starts; an error
// fails the constructor or Subscribe.
type SessionChecker interface {
	Check(ctx context.Context, db *sql.DB) error
}

// Stmt is one SQL statement (or one batch, for databases that run batches)
// with its arguments in order.
type Stmt struct {
	SQL  string
	Args []any
}

// Migration is one version of the shared tables.
type Migration struct {
	Version int
	Stmts   []Stmt
}

// Names are the shared table names of one deployment, already quoted and
// qualified by the engine with the dialect's QuoteIdent.
type Names struct {
	// Schema is the unquoted schema, "" for the connection's default.
	Schema string
	// Prefix is the unquoted table name prefix (DefaultTablePrefix).
	Prefix string

	Subscriptions string // quoted, qualified subscriptions table
	Errors        string // quoted, qualified error (dead-letter) table
	Version       string // quoted, qualified schema version table
	Listeners     string // quoted, qualified fleet listeners table (FleetDialect)
	Paused        string // quoted, qualified paused queues table (FleetDialect)

	// Unquoted names, for index names, constraint names and lock keys.
	SubscriptionsName, ErrorsName, VersionName string
	ListenersName, PausedName                  string
}

// Queue identifies one queue table.
type Queue struct {
	Topic string // Watermill topic
	Group string // consumer group; "" for the default queue
	Name  string // unquoted table name, for index names, lock keys, wake-ups
	Table string // quoted, qualified table name
	// Errors is the quoted, qualified error table (same as Names.Errors).
	Errors string
}

// Ref fences one claimed row: its id and the owner token of its claim.
type Ref struct {
	ID    int64
	Owner int64
}

// RetryRef is a Ref with its redelivery delay and the attempt's line
// (transport.AttemptLine), which Retry appends to the row's
// transport.MetadataAttemptErrors header as transport.AppendAttemptLine
// does: the newest lines that fit in transport.MaxAttemptErrors
// characters. Retry leaves headers that are not a JSON object its
// database can edit as they are.
type RetryRef struct {
	Ref
	Delay time.Duration
	Line  string
}

// InsertRow is one message to insert.
type InsertRow struct {
	UUID    string
	Headers []byte // JSON object of metadata
	Body    []byte
	// Delay until the row is due; 0 means now.
	Delay time.Duration
	// TTL after which an undelivered row is dropped; 0 means never.
	TTL time.Duration
	// OrderingKey is the message's ordering key; "" is none (NULL).
	OrderingKey string
}

// Millis returns d in whole milliseconds, rounding up so that a positive
// duration never becomes zero. Dialects use it to encode durations.
func Millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
