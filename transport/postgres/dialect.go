package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// WakeChannel is the NOTIFY channel every insert signals, with the queue
// table name as payload.
const WakeChannel = "berth_wake"

// Dialect is the PostgreSQL dialect: every statement of the transport on
// PostgreSQL is in this file except the sweeper's DeadLetterStray (stray.go).
// It also classifies errors (transient.go).
type Dialect struct{}

var (
	_ sqlqueue.Dialect                = Dialect{}
	_ sqlqueue.Notifier               = Dialect{}
	_ sqlqueue.NotifyCoalescer        = Dialect{}
	_ sqlqueue.MissingTableClassifier = Dialect{}
	_ sqlqueue.QueueChecker           = Dialect{}
	_ sqlqueue.MultiProber            = Dialect{}
	_ sqlqueue.DirectDialect          = Dialect{}
	_ sqlqueue.AckRider               = Dialect{}
	_ sqlqueue.Limiter                = Dialect{}
	_ sqlqueue.StatsDialect           = Dialect{}
	_ sqlqueue.HeadPromoter           = Dialect{}
	_ sqlqueue.SettleCommitter        = Dialect{}
)

// MaxOrderingKeyLength is the longest ordering key, in bytes
// (transport.MetadataOrderingKey): keys are indexed, and a publish with a
// longer one fails with transport.ErrInvalidMessage.
const MaxOrderingKeyLength = 255

// Limits implements sqlqueue.Limiter: only the ordering key is bounded.
func (Dialect) Limits() sqlqueue.Limits {
	return sqlqueue.Limits{OrderingKey: MaxOrderingKeyLength}
}

// Name implements sqlqueue.Dialect.
func (Dialect) Name() string { return "postgres" }

// MessagingSystem is the messaging.system that package telemetry reports
// for PostgreSQL queue tables (sqlqueue.MessagingSystem of this dialect): the
// OpenTelemetry conventions define no value for them.
const MessagingSystem = "berth.postgres"

// QuoteIdent implements sqlqueue.Dialect.
func (Dialect) QuoteIdent(name string) string { return pgx.Identifier{name}.Sanitize() }

// st is a statement and its arguments.
//
// # Plans
//
// Statements run prepared (pgx caches them per connection), and
// PostgreSQL plans a prepared statement anew at every execution for as
// long as the plans it makes for the given values are estimated cheaper
// than its generic plan. Arrays (unnest) and LIMITs made them so: planned
// for one row's array or a few rows' limit, a statement was estimated at
// a fraction of its generic plan, so every one-message publish and every
// small claim, Begin or Complete was planned again. A one-message publish
// spent 0.21 ms planning and 0.06 ms executing; planning was two thirds of
// a hot key's hand-off claim on the server. So arrays and limits are read
// through a scalar sub-select (unnest((SELECT $1::bigint[])),
// LIMIT (SELECT $3::int)), whose value the planner does not see: the trial
// plans cost what the generic plan costs, plus their planning, and after
// its five trials PostgreSQL keeps the generic plan
// (TestPerMessageStatementsKeepTheirGenericPlan). The generic plans are
// the ones the statements are shaped for (TestGenericPlansUseIndexes,
// TestSettlementPlansUseThePrimaryKey); docs/benchmarks.md has the gain.
func st(sql string, args ...any) sqlqueue.Stmt { return sqlqueue.Stmt{SQL: sql, Args: args} }

// Lock implements sqlqueue.Dialect with transaction-scoped advisory locks;
// the key includes current_schema() so unqualified deployments in
// different schemas do not contend.
func (Dialect) Lock(key string, wait bool) sqlqueue.Stmt {
	if wait {
		return st(`SELECT true FROM (SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || $1, 0))) AS l`, key)
	}
	return st(`SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || ':' || $1, 0))`, key)
}

// VersionTable implements sqlqueue.Dialect.
func (Dialect) VersionTable(n sqlqueue.Names) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{st(`CREATE TABLE IF NOT EXISTS ` + n.Version + ` (
	version    integer     NOT NULL PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now()
)`)}
}

// SchemaVersion implements sqlqueue.Dialect.
func (Dialect) SchemaVersion(n sqlqueue.Names) sqlqueue.Stmt {
	return st(`SELECT coalesce(max(version), 0) FROM ` + n.Version)
}

// SetSchemaVersion implements sqlqueue.Dialect.
func (Dialect) SetSchemaVersion(n sqlqueue.Names, v int) sqlqueue.Stmt {
	return st(`INSERT INTO ` + n.Version + ` (version) VALUES (` + strconv.Itoa(v) + `) ON CONFLICT DO NOTHING`)
}

// Migrations implements sqlqueue.Dialect.
func (d Dialect) Migrations(n sqlqueue.Names) []sqlqueue.Migration {
	return []sqlqueue.Migration{{Version: 1, Stmts: []sqlqueue.Stmt{
		st(`CREATE TABLE IF NOT EXISTS ` + n.Subscriptions + ` (
	topic          text        NOT NULL,
	consumer_group text        NOT NULL,
	queue_table    text        NOT NULL,
	created_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (topic, consumer_group)
)`),
		st(`CREATE TABLE IF NOT EXISTS ` + n.Errors + ` (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue_table  text        NOT NULL,
	message_uuid text        NOT NULL,
	headers      text        NOT NULL,
	body         bytea       NOT NULL,
	attempts     integer     NOT NULL,
	reason       text        NOT NULL,
	original_id  bigint      NOT NULL,
	created_at   timestamptz NOT NULL,
	failed_at    timestamptz NOT NULL DEFAULT now()
)`),
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(n.ErrorsName+"_queue") + ` ON ` + n.Errors + ` (queue_table, failed_at)`),
	}}, {Version: 2, Stmts: []sqlqueue.Stmt{
		// Version 2 adds the ordering key: every subscribed queue table
		// gets the column and its index now, under the schema lock; a
		// table only a publisher made gets them from CreateQueue at its
		// next use (QueueExists reports the index missing).
		eachQueueTable(n, `ordering_key text`, `_key`, keyIndex),
	}}, {Version: 3, Stmts: []sqlqueue.Stmt{
		// Version 3 adds the waiting marker (see Insert) and the claim's
		// index over the rows that are not waiting, to every subscribed
		// queue table, as version 2 did. Existing rows are not waiting:
		// the claim's head check still orders them.
		eachQueueTable(n, `waiting boolean NOT NULL DEFAULT false`, `_ready`, readyIndex),
	}}}
}

// eachQueueTable is a migration's statement that adds column (its
// definition) and the index <table><suffix> on index (its column list and
// filter) to every subscribed queue table that exists, under the schema
// lock.
func eachQueueTable(n sqlqueue.Names, column, suffix, index string) sqlqueue.Stmt {
	return st(`DO $berth$
DECLARE r text; t text;
BEGIN
	FOR r IN SELECT queue_table FROM ` + n.Subscriptions + ` LOOP
		t := ` + schemaPrefix(n.Schema) + `quote_ident(r);
		IF to_regclass(t) IS NOT NULL THEN
			EXECUTE 'ALTER TABLE ' || t || ' ADD COLUMN IF NOT EXISTS ` + column + `';
			EXECUTE 'CREATE INDEX IF NOT EXISTS ' || quote_ident(r || '` + suffix + `') || ' ON ' || t || ' ` + index + `';
		END IF;
	END LOOP;
END
$berth$`)
}

// schemaPrefix is the SQL expression that qualifies a quoted table name in
// schema ("" for the search path's).
func schemaPrefix(schema string) string {
	if schema == "" {
		return ""
	}
	return "quote_ident(" + literal(schema) + ") || '.' || "
}

// literal returns s as a SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// keyIndex is the column list and filter of the ordering key index
// (<table>_key): the claim's head check is one seek of it.
const keyIndex = `(ordering_key, id) WHERE ordering_key IS NOT NULL`

// CreateQueue implements sqlqueue.Dialect. The partial index on pending
// rows keeps claimed rows out of other claims' path; the lease index serves
// the sweeper, the expiry index DropExpired, the key index the claim's
// head check. A table made by an earlier version gets the ordering_key
// column (ADD COLUMN IF NOT EXISTS: a catalog change, no rewrite) and the
// indexes it lacks at its first use after the upgrade (QueueExists then
// reports one missing): plain CREATE INDEXes, which hold the table's
// writers while they read the table once.
func (d Dialect) CreateQueue(q sqlqueue.Queue) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{
		st(`CREATE TABLE IF NOT EXISTS ` + q.Table + ` (
	id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	uuid        text        NOT NULL,
	headers     text        NOT NULL,
	body        bytea       NOT NULL,
	state       smallint    NOT NULL DEFAULT 0,
	owner       bigint,
	attempts    integer     NOT NULL DEFAULT 0,
	created_at  timestamptz NOT NULL DEFAULT now(),
	due_at      timestamptz NOT NULL DEFAULT now(),
	lease_until timestamptz,
	expires_at  timestamptz,
	ordering_key text,
	waiting     boolean     NOT NULL DEFAULT false
)`),
		st(`ALTER TABLE ` + q.Table + ` ADD COLUMN IF NOT EXISTS ordering_key text`),
		st(`ALTER TABLE ` + q.Table + ` ADD COLUMN IF NOT EXISTS waiting boolean NOT NULL DEFAULT false`),
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(q.Name+"_pending") + ` ON ` + q.Table + ` (due_at, id) WHERE state = 0`),
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(q.Name+"_leased") + ` ON ` + q.Table + ` (lease_until) WHERE state <> 0`),
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(q.Name+"_expiry") + ` ON ` + q.Table + ` (expires_at) WHERE state = 0 AND expires_at IS NOT NULL`),
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(q.Name+"_key") + ` ON ` + q.Table + ` ` + keyIndex),
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(q.Name+"_ready") + ` ON ` + q.Table + ` ` + readyIndex),
	}
}

// readyIndex is the column list and filter of the claim's index
// (<table>_ready): pending rows, less the keyed rows waiting behind an
// unsettled row of their key (see Insert), so that a claim over a few hot
// keys' backlog does not walk the rows it could not take.
const readyIndex = `(due_at, id) WHERE state = 0 AND NOT waiting`

// QueueExists implements sqlqueue.QueueChecker: a catalog lookup, which
// takes no lock on the table, of the table and the indexes CreateQueue
// makes.
func (d Dialect) QueueExists(q sqlqueue.Queue) sqlqueue.Stmt {
	schema := strings.TrimSuffix(q.Table, d.QuoteIdent(q.Name)) // "" or `"schema".`
	return st(`SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND to_regclass($3) IS NOT NULL AND to_regclass($4) IS NOT NULL AND to_regclass($5) IS NOT NULL AND to_regclass($6) IS NOT NULL`,
		q.Table, schema+d.QuoteIdent(q.Name+"_pending"), schema+d.QuoteIdent(q.Name+"_leased"), schema+d.QuoteIdent(q.Name+"_expiry"),
		schema+d.QuoteIdent(q.Name+"_key"), schema+d.QuoteIdent(q.Name+"_ready"))
}

// Subscribe implements sqlqueue.Dialect.
func (Dialect) Subscribe(n sqlqueue.Names, q sqlqueue.Queue) sqlqueue.Stmt {
	return st(`INSERT INTO `+n.Subscriptions+` (topic, consumer_group, queue_table) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		q.Topic, q.Group, q.Name)
}

// Subscriptions implements sqlqueue.Dialect.
func (Dialect) Subscriptions(n sqlqueue.Names, topic string) sqlqueue.Stmt {
	return st(`SELECT queue_table FROM `+n.Subscriptions+` WHERE topic = $1 ORDER BY consumer_group`, topic)
}

// Insert implements sqlqueue.Dialect: one statement for any number of rows
// (arrays), with the NOTIFY that wakes listening subscribers at commit.
func (d Dialect) Insert(q sqlqueue.Queue, rows []sqlqueue.InsertRow) []sqlqueue.Stmt {
	return d.InsertNotify(q, rows, true)
}

// InsertNotify implements sqlqueue.NotifyCoalescer: Insert, whose NOTIFY
// is sent only when notify is true ($7, so that both share one statement
// text and one prepared plan; the insert runs either way, as a
// data-modifying CTE always does).
//
// Rows with an ordering key first take a transaction-scoped advisory lock
// per distinct key of the queue (in key order, so two inserts never wait
// for each other in a cycle), held until the publishing transaction ends:
// the next insert of the key gets its ids only after this one committed
// or rolled back. So a key's ids are in commit order, which the claim's
// head check relies on (see Claim). The lock is taken in an init plan
// (lk), which the executor runs before it reads the first row and so
// before the first id is drawn; with no key, lk locks nothing.
//
// A keyed row is inserted waiting (out of the claim's index, see
// readyIndex) when an earlier row of its key is still in the table: an
// earlier row of the same insert, or a row the lock-holding read pv finds.
// pv runs after lk (its one-time filter reads lk), locks the key's newest
// row (FOR KEY SHARE: a Complete of that row waits for this insert's
// commit, so the settling source's hand-off, a later statement, sees the
// new row) and skips a row that another transaction is deleting or
// claiming (SKIP LOCKED: the new row is then inserted ready, never
// waiting behind a row that is leaving). A row inserted ready behind an
// unsettled one costs only what it cost before the marker: the claim's
// head check passes it over. A delayed row is never waiting: a hand-off
// that finds it at its key's head before it is due leaves it to the full
// claim. A row left waiting at its key's head is taken by the hand-off
// (ClaimKeys, which ignores the marker) or released by the sweeper
// (PromoteHeads).
func (Dialect) InsertNotify(q sqlqueue.Queue, rows []sqlqueue.InsertRow, notify bool) []sqlqueue.Stmt {
	uuids := make([]string, len(rows))
	headers := make([]string, len(rows))
	bodies := make([][]byte, len(rows))
	delays := make([]int64, len(rows))
	ttls := make([]int64, len(rows))
	keys := make([]*string, len(rows))
	for i, r := range rows {
		uuids[i], headers[i], bodies[i] = r.UUID, string(r.Headers), r.Body
		delays[i], ttls[i] = sqlqueue.Millis(r.Delay), sqlqueue.Millis(r.TTL)
		if r.OrderingKey != "" {
			keys[i] = &rows[i].OrderingKey
		}
	}
	return []sqlqueue.Stmt{st(`WITH lk AS (
	SELECT count(*) AS n FROM (
		SELECT pg_advisory_xact_lock(hashtextextended('berth:key:' || $6 || ':' || k, 0))
		FROM (SELECT DISTINCT k FROM unnest((SELECT $8::text[])) AS k WHERE k IS NOT NULL ORDER BY k) AS s
	) AS l
), pv AS (
	SELECT k.k FROM (SELECT DISTINCT k FROM unnest((SELECT $8::text[])) AS k WHERE k IS NOT NULL) AS k
	WHERE EXISTS (
		SELECT 1 FROM `+q.Table+` AS e
		WHERE (SELECT n FROM lk) >= 0 AND e.ordering_key = k.k
		ORDER BY e.id DESC LIMIT 1
		FOR KEY SHARE OF e SKIP LOCKED)
), ins AS (
	INSERT INTO `+q.Table+` (uuid, headers, body, due_at, expires_at, ordering_key, waiting)
	SELECT r.uuid, r.headers, r.body,
	       now() + r.delay_ms * interval '1 millisecond',
	       CASE WHEN r.ttl_ms > 0 THEN now() + r.ttl_ms * interval '1 millisecond' END,
	       r.ordering_key,
	       r.ordering_key IS NOT NULL AND r.delay_ms <= 0 AND (
	           row_number() OVER (PARTITION BY r.ordering_key ORDER BY r.ord) > 1
	           OR r.ordering_key IN (SELECT k FROM pv))
	FROM unnest((SELECT $1::text[]), (SELECT $2::text[]), (SELECT $3::bytea[]), (SELECT $4::bigint[]), (SELECT $5::bigint[]), (SELECT $8::text[])) WITH ORDINALITY
	     AS r(uuid, headers, body, delay_ms, ttl_ms, ordering_key, ord)
	WHERE (SELECT n FROM lk) >= 0
	ORDER BY r.ord
	RETURNING 1
)
SELECT pg_notify('`+WakeChannel+`', $6) FROM (SELECT 1 FROM ins LIMIT 1) AS n WHERE $7::boolean`,
		uuids, headers, bodies, delays, ttls, q.Name, notify, keys)}
}

// Notify implements sqlqueue.NotifyCoalescer: the NOTIFY alone, for the
// trailing notification of inserts that left theirs out.
func (Dialect) Notify(q sqlqueue.Queue) sqlqueue.Stmt {
	return st(`SELECT pg_notify('`+WakeChannel+`', $1)`, q.Name)
}

// Claim implements sqlqueue.Dialect.
//
// # Ordering keys
//
// A keyed row is claimable only when no row of its key has a lower id: one
// seek of the key index (<table>_key), whatever the lower row's state —
// pending but delayed or retrying with backoff, fetched, or processing —
// so a key's head blocks it until it is settled (deleted, or moved to the
// error table). Unkeyed rows skip the check.
//
// Why two claimers, at READ COMMITTED, never hold two rows of one key:
// suppose claim C1 takes row a and claim C2 row b of key k, a < b, and
// both are fetched or processing at once. Rows are deleted only when
// settled, never re-inserted, and a was not settled before C1 took it, so
// a existed, unsettled, throughout C2. C2 took b, so a was not in C2's
// snapshot: a committed after C2's snapshot, b before it. But Insert holds
// k's advisory lock from before it draws a's id until a's transaction
// ends, so b — drawn later (b > a) — was drawn after a's transaction
// ended, and committed after it: a contradiction. The same row taken
// twice is what FOR UPDATE SKIP LOCKED already excludes (a second claimer
// skips the locked row, or re-checks state = 0 on its new version and
// drops it). A snapshot that is stale the other way (it still shows a row
// a concurrent Complete deleted) only blocks the key for this claim.
// Retry, Release and Recover keep a row's id, so it stays the head.
//
// The cost: a key's blocked rows stay in the pending index, and the scan
// passes them (one key-index seek each) on its way to claimable rows;
// with many keys that is about the keys in flight, with a few hot keys and
// a deep backlog it is the backlog (docs/ordering.md, Cost).
func (Dialect) Claim(q sqlqueue.Queue, owner int64, n int, fetchTimeout time.Duration) sqlqueue.Stmt {
	// id = ANY(ARRAY(subquery)), not id IN (subquery): the array is an
	// init plan and the update an index scan on the primary key whatever
	// the plan. With IN, the generic plan of the prepared statement (see
	// st; its LIMIT unknown, so estimated at 10% of the table) is a hash
	// semi-join over a sequential scan of the whole table:
	// every claim then costs O(backlog), measured at 11 ms against 0.6 ms
	// for 64 rows out of 20,000.
	return st(`UPDATE `+q.Table+` AS q
SET state = 1, owner = $1, lease_until = now() + $2 * interval '1 millisecond', waiting = false
WHERE q.id = ANY(ARRAY(`+claimable(q.Table)+`))
RETURNING q.id, q.uuid, q.headers, q.body, q.attempts`,
		owner, sqlqueue.Millis(fetchTimeout), n)
}

// ClaimDirect implements sqlqueue.DirectDialect: Claim's row choice, taken
// once as an array (the init plan Claim uses), of which the first direct
// entries (the oldest due) are set to processing as Begin would, the rest
// to fetched, in one statement.
func (Dialect) ClaimDirect(q sqlqueue.Queue, owner int64, n, direct int, fetchTimeout, lease time.Duration) sqlqueue.Stmt {
	return st(`WITH `+directChoice(q.Table)+`
`+directUpdate(q.Table),
		owner, sqlqueue.Millis(fetchTimeout), n, direct, sqlqueue.Millis(lease))
}

// ClaimKeys implements sqlqueue.KeyClaimer: ClaimComplete whose row
// choice is the heads of the given keys ($8) only, so handing a settled
// key's next row to the source that settled it reads one row per key (a
// seek of the key index), not the pending backlog.
//
// A key's head (h) is its lowest id other than the rows this statement
// deletes (done: acks riding on it, fenced as Complete's), since those are
// still visible in the statement's one snapshot. Its seek starts at the
// key's bound ($9: the settled head that freed the key), not at the key's
// first index entry: a settled row's entries stay in the key index, dead,
// until a vacuum, and a hot key's seek walked them all (10 keys drained of
// 20,000 rows: 1.24 million buffers read by the hand-offs without the
// bound, 0.54 million with it). The head is claimed when
// pending, due and not expired, and not locked by another claim, waiting
// or not (the marker only keeps rows out of the full claim's index). That
// is Claim's head check, made from the other side, and exact for the same
// reasons (see Claim): a lower row of the key that the snapshot misses
// would have committed after a higher one, which Insert's key lock rules
// out; a done row that was not deleted (its lease was lost) is not left
// out, and stays its key's head. A head it does not claim keeps its
// marker: one not due yet was inserted delayed, which is never waiting
// (see InsertNotify); the keys past the $3 rows stay freed for the
// source's next claim (claimKeyRows); the sweeper promotes what is left
// (PromoteHeads).
//
// The heads found are then read again, to be locked, by their ids through
// the primary key. Their state is tested as "state + 0" (as the
// settlements test theirs, see refArrays), which no partial index's
// predicate matches: with a plain "state = 0" the generic plan made
// without statistics (a new table, or one analyzed while empty, as a
// queue's first claims run before the source's ANALYZE) read the pending
// index instead, every due pending row filtered by id, and the connection
// kept that plan. In a drain of 20,000 rows with 1,000 keys, 17
// hand-offs ran it, 26 ms each instead of 1–5: 445 ms of the server's
// time in a drain of 1.2 s (TestHandOffLocksHeadsByPrimaryKey,
// docs/benchmarks.md).
func (Dialect) ClaimKeys(q sqlqueue.Queue, owner int64, keys []string, from []int64, n, direct int, fetchTimeout, lease time.Duration, done []sqlqueue.Ref) sqlqueue.Stmt {
	ids, owners := refArrays(done)
	if len(from) != len(keys) {
		from = make([]int64, len(keys))
	}
	return st(`WITH done AS (
	DELETE FROM `+q.Table+` AS x
	USING unnest((SELECT $6::bigint[]), (SELECT $7::bigint[])) AS r(id, owner)
	WHERE x.id = r.id AND x.owner = r.owner AND x.state + 0 = 2
	RETURNING x.id
), h AS (
	SELECT ARRAY(
		SELECT (SELECT e.id FROM `+q.Table+` AS e
		        WHERE e.ordering_key = k.k AND e.id >= k.f AND e.id <> ALL(ARRAY(SELECT id FROM done))
		        ORDER BY e.id LIMIT 1)
		FROM unnest((SELECT $8::text[]), (SELECT $9::bigint[])) AS k(k, f)) AS ids
), `+directChoiceOf(`
	SELECT p.id FROM `+q.Table+` AS p, h
	WHERE p.id = ANY(h.ids)
	  AND p.state + 0 = 0 AND p.due_at <= now() AND (p.expires_at IS NULL OR p.expires_at > now())
	ORDER BY p.due_at, p.id
	LIMIT (SELECT $3::int)
	FOR UPDATE OF p SKIP LOCKED
`)+`, u AS (
`+directUpdate(q.Table)+`)
SELECT id, uuid, headers, body, attempts, state FROM u
UNION ALL
SELECT id, '', NULL, NULL, 0, `+strconv.Itoa(sqlqueue.StateAcked)+`::smallint FROM done`,
		owner, sqlqueue.Millis(fetchTimeout), n, direct, sqlqueue.Millis(lease), ids, owners, keys, from)
}

// PromoteHeads implements sqlqueue.HeadPromoter: the sweeper's repair of a
// key whose head is waiting with no hand-off coming (its predecessor left
// by a path that hands nothing off: a sweep, the console, a listener that
// stopped); at most limit rows.
//
// A key's head is the first entry of the key in the key index. The first
// promoteWalk keys are found one seek each, skipping from key to key (a
// recursive walk), and the keys after them by one pass over the rest of
// the index (DISTINCT ON). With a few hot keys and a deep backlog the pass
// read every blocked row, every sweep: 10 keys × 50,000 rows took 140 ms
// (38,695 buffers) against 0.3 ms walked (55 buffers; TestPromoteHeadsSkipsBacklog).
// With many keys of a few rows each, the walk stops at promoteWalk (about
// 10 ms) and the pass reads what it read before: 100,000 keys of 2 rows,
// 86–147 ms before, 93–120 after.
func (Dialect) PromoteHeads(q sqlqueue.Queue, limit int) sqlqueue.Stmt {
	return st(`WITH RECURSIVE walk AS (
	(SELECT ordering_key, id, waiting, state, 1 AS n FROM `+q.Table+`
	 WHERE ordering_key IS NOT NULL ORDER BY ordering_key, id LIMIT 1)
	UNION ALL
	SELECT x.ordering_key, x.id, x.waiting, x.state, walk.n + 1 FROM walk, LATERAL (
		SELECT e.ordering_key, e.id, e.waiting, e.state FROM `+q.Table+` AS e
		WHERE e.ordering_key > walk.ordering_key ORDER BY e.ordering_key, e.id LIMIT 1) AS x
	WHERE walk.n < $2
), heads AS (
	SELECT id, waiting, state FROM walk
	UNION ALL
	(SELECT DISTINCT ON (e.ordering_key) e.id, e.waiting, e.state FROM `+q.Table+` AS e
	 WHERE e.ordering_key > (SELECT ordering_key FROM walk WHERE n = $2)
	 ORDER BY e.ordering_key, e.id)
)
UPDATE `+q.Table+` AS w SET waiting = false
WHERE w.id IN (SELECT id FROM heads WHERE waiting AND state = 0 LIMIT $1)
AND w.waiting AND w.state = 0
RETURNING w.id`, limit, promoteWalk)
}

// promoteWalk is how many keys PromoteHeads finds by a seek each before it
// reads the rest of the key index in one pass.
const promoteWalk = 1000

// claimable is the claims' row choice ($3 rows at most): due rows, oldest
// first, a keyed row only as its key's head (see Claim), locked, skipping
// rows another claim has locked.
func claimable(table string) string {
	return `
	SELECT p.id FROM ` + table + ` AS p
	WHERE p.state = 0 AND NOT p.waiting AND p.due_at <= now() AND (p.expires_at IS NULL OR p.expires_at > now())
	  AND (p.ordering_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM ` + table + ` AS e WHERE e.ordering_key = p.ordering_key AND e.id < p.id))
	ORDER BY p.due_at, p.id
	LIMIT (SELECT $3::int)
	FOR UPDATE OF p SKIP LOCKED
`
}

// directChoice is ClaimDirect's CTEs: c, the chosen ids as an array; d,
// them, the first $4 of them (the rows to start), and whether that is all
// of them.
func directChoice(table string) string { return directChoiceOf(claimable(table)) }

// directChoiceOf is directChoice over another row choice.
func directChoiceOf(choice string) string {
	return `c AS (SELECT ARRAY(` + choice + `) AS ids), d AS (SELECT c.ids, c.ids[1:$4] AS started, cardinality(c.ids) <= $4 AS all_started FROM c)`
}

// directUpdate is ClaimDirect's UPDATE of d's rows: started ones to
// processing as Begin would ($5: the lease), the others to fetched ($2:
// the fetch timeout), all for owner $1. A claim that starts every row it
// takes (a drain with free permits, most of them) skips the search of the
// started array, which costs a comparison per started row for each row
// and each of the three columns (OR evaluates left to right and stops at
// the first true).
func directUpdate(table string) string {
	return `UPDATE ` + table + ` AS q
SET state = CASE WHEN d.all_started OR q.id = ANY(d.started) THEN 2 ELSE 1 END,
	owner = $1,
	waiting = false,
	attempts = q.attempts + CASE WHEN d.all_started OR q.id = ANY(d.started) THEN 1 ELSE 0 END,
	lease_until = now() + CASE WHEN d.all_started OR q.id = ANY(d.started) THEN $5::bigint ELSE $2::bigint END * interval '1 millisecond'
FROM d
WHERE q.id = ANY(d.ids)
RETURNING q.id, q.uuid, q.headers, q.body, q.attempts, q.state`
}

// ClaimComplete implements sqlqueue.AckRider: ClaimDirect's statement with
// Complete's DELETE as a data-modifying CTE before it. Both see one
// snapshot: the claim cannot take a keyed row whose head the DELETE
// removes (the source's wake-up after the ack claims it next), and the
// DELETE touches only processing rows, which the claim never reads.
func (Dialect) ClaimComplete(q sqlqueue.Queue, owner int64, n, direct int, fetchTimeout, lease time.Duration, done []sqlqueue.Ref) sqlqueue.Stmt {
	ids, owners := refArrays(done)
	return st(`WITH done AS (
	DELETE FROM `+q.Table+` AS x
	USING unnest((SELECT $6::bigint[]), (SELECT $7::bigint[])) AS r(id, owner)
	WHERE x.id = r.id AND x.owner = r.owner AND x.state + 0 = 2
	RETURNING x.id
), `+directChoice(q.Table)+`, u AS (
`+directUpdate(q.Table)+`)
SELECT id, uuid, headers, body, attempts, state FROM u
UNION ALL
SELECT id, '', NULL, NULL, 0, `+strconv.Itoa(sqlqueue.StateAcked)+`::smallint FROM done`,
		owner, sqlqueue.Millis(fetchTimeout), n, direct, sqlqueue.Millis(lease), ids, owners)
}

// ReleaseDirect implements sqlqueue.DirectDialect.
func (Dialect) ReleaseDirect(q sqlqueue.Queue, refs []sqlqueue.Ref) sqlqueue.Stmt {
	ids, owners := refArrays(refs)
	return st(`UPDATE `+q.Table+` AS q
SET state = 0, owner = NULL, lease_until = NULL, attempts = greatest(q.attempts - 1, 0)
FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[])) AS r(id, owner)
WHERE q.id = r.id AND q.owner = r.owner AND q.state + 0 = 2
RETURNING q.id`, ids, owners)
}

// HasStats implements sqlqueue.StatsDialect: pg_stats (the view readable
// by whoever may read the table, unlike pg_statistic) has a row for the
// state column, and the table is at most four times the size its last
// ANALYZE or VACUUM recorded (pg_class.relpages), plus 16 pages (128 kB)
// of slack. to_regclass resolves the quoted name as the statements do
// (a missing table reads as no statistics; ANALYZE then reports it).
//
// The size test is for the plans the connections keep, not the
// statistics themselves: a statement's generic plan made while the table
// was a page or two (a queue at light load) reads it whole (a sequential
// scan is the cheapest way to read one page), and PostgreSQL keeps the
// plan as the table grows, until something invalidates it, such as an
// ANALYZE. A burst of 100,000 rows into a queue that autovacuum had left
// at four pages drained at 10,585 msg/s, its statements scanning the
// growing table about 1,150 times; with this test, at 15,128–19,607 and
// about 60 times (docs/benchmarks.md).
func (Dialect) HasStats(q sqlqueue.Queue) sqlqueue.Stmt {
	return st(`SELECT EXISTS (
	SELECT 1 FROM pg_stats AS s
	JOIN pg_class AS c ON c.relname = s.tablename
	JOIN pg_namespace AS n ON n.oid = c.relnamespace AND n.nspname = s.schemaname
	WHERE c.oid = to_regclass($1) AND s.attname = 'state'
	  AND pg_relation_size(c.oid) <= (4 * c.relpages + 16)::bigint * current_setting('block_size')::bigint)`, q.Table)
}

// Analyze implements sqlqueue.StatsDialect. ANALYZE takes a SHARE UPDATE
// EXCLUSIVE lock, which DML does not wait for; it reads a sample of at most
// 300 × default_statistics_target rows. A role that does not own the table
// gets a warning, not an error, and no statistics.
func (Dialect) Analyze(q sqlqueue.Queue) sqlqueue.Stmt {
	return st(`ANALYZE ` + q.Table)
}

// MultiProbe implements sqlqueue.MultiProber: per queue, a seek of the
// ready index (pending rows not waiting behind their key's head, the rows
// a claim can take) for a due row, one for the earliest future row, and one of
// the primary key, as one UNION ALL (one statement, one transaction, for
// every idle queue of a pool). Plain reads: they wait for no lock. Queue
// names are engine-made identifiers ([a-z0-9_]) and travel as arguments.
func (Dialect) MultiProbe(qs []sqlqueue.Queue) sqlqueue.Stmt {
	var b strings.Builder
	args := make([]any, len(qs))
	for i, q := range qs {
		if i > 0 {
			b.WriteString("\nUNION ALL\n")
		}
		args[i] = q.Name
		fmt.Fprintf(&b, `SELECT $%d::text,
	EXISTS (SELECT 1 FROM %[2]s WHERE state = 0 AND NOT waiting AND due_at <= now() AND (expires_at IS NULL OR expires_at > now())),
	(SELECT ceil(extract(epoch FROM min(due_at) - now()) * 1000)::bigint FROM %[2]s WHERE state = 0 AND NOT waiting AND due_at > now()),
	NOT EXISTS (SELECT 1 FROM %[2]s)`, i+1, q.Table)
	}
	return st(b.String(), args...)
}

// refArrays splits refs into the id and owner arrays the settlement
// statements (Begin, Complete, Renew, Release, ReleaseDirect and
// ClaimComplete's DELETE; Retry builds its own, with the delays) join with
// unnest. Those statements test the
// row's state as "state + 0", an expression the planner has no statistics
// for: statistics gathered during a drain (an ANALYZE, by autovacuum or by
// hand) say almost every row is pending, so a plain "state = 2" looks like
// one row, and the planner then reads every leased row through the lease
// index (dead entries included) and joins them in a nested loop, for every
// settlement. Measured with an ANALYZE early in each drain: 5,800–8,900
// msg/s instead of ~18,000. With the expression the join goes through the
// primary key (TestSettlementPlansUseThePrimaryKey).
func refArrays(refs []sqlqueue.Ref) (ids, owners []int64) {
	ids = make([]int64, len(refs))
	owners = make([]int64, len(refs))
	for i, r := range refs {
		ids[i], owners[i] = r.ID, r.Owner
	}
	return ids, owners
}

// Begin implements sqlqueue.Dialect.
func (Dialect) Begin(q sqlqueue.Queue, refs []sqlqueue.Ref, lease time.Duration) sqlqueue.Stmt {
	ids, owners := refArrays(refs)
	return st(`UPDATE `+q.Table+` AS q
SET state = 2, attempts = q.attempts + 1, lease_until = now() + $3 * interval '1 millisecond'
FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[])) AS r(id, owner)
WHERE q.id = r.id AND q.owner = r.owner AND q.state + 0 = 1
RETURNING q.id, q.attempts`, ids, owners, sqlqueue.Millis(lease))
}

// Complete implements sqlqueue.Dialect.
func (Dialect) Complete(q sqlqueue.Queue, refs []sqlqueue.Ref) sqlqueue.Stmt {
	ids, owners := refArrays(refs)
	return st(`DELETE FROM `+q.Table+` AS q
USING unnest((SELECT $1::bigint[]), (SELECT $2::bigint[])) AS r(id, owner)
WHERE q.id = r.id AND q.owner = r.owner AND q.state + 0 = 2
RETURNING q.id`, ids, owners)
}

// Renew implements sqlqueue.Dialect.
func (Dialect) Renew(q sqlqueue.Queue, refs []sqlqueue.Ref, lease time.Duration) sqlqueue.Stmt {
	ids, owners := refArrays(refs)
	return st(`UPDATE `+q.Table+` AS q
SET lease_until = now() + $3 * interval '1 millisecond'
FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[])) AS r(id, owner)
WHERE q.id = r.id AND q.owner = r.owner AND q.state + 0 = 2
RETURNING q.id`, ids, owners, sqlqueue.Millis(lease))
}

// Retry implements sqlqueue.Dialect.
//
// The attempt's line goes into the headers through jsonb, which refuses
// what json (and Go) accept: \u0000 and unpaired surrogate escapes. A
// row whose headers hold such an escape (Go never writes the surrogates;
// it writes a NUL in metadata as \u0000) keeps its headers, so that one
// row cannot fail its batch; so do headers that are not an object.
func (Dialect) Retry(q sqlqueue.Queue, rows []sqlqueue.RetryRef) sqlqueue.Stmt {
	ids := make([]int64, len(rows))
	owners := make([]int64, len(rows))
	delays := make([]int64, len(rows))
	lines := make([]string, len(rows))
	for i, r := range rows {
		ids[i], owners[i], delays[i], lines[i] = r.ID, r.Owner, sqlqueue.Millis(r.Delay), r.Line
	}
	return st(`UPDATE `+q.Table+` AS q
SET state = 0, owner = NULL, lease_until = NULL, due_at = now() + r.delay_ms * interval '1 millisecond',
	headers = CASE WHEN q.headers !~ '^\s*\{' OR q.headers ~* '\\u(0000|d[89a-f])' THEN q.headers
		ELSE (q.headers::jsonb || jsonb_build_object('`+transport.MetadataAttemptErrors+`', `+keepLast(`coalesce(q.headers::jsonb ->> '`+transport.MetadataAttemptErrors+`', '') || r.line`)+`))::text END
FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[]), (SELECT $3::bigint[]), (SELECT $4::text[])) AS r(id, owner, delay_ms, line)
WHERE q.id = r.id AND q.owner = r.owner AND q.state + 0 = 2
RETURNING q.id`, ids, owners, delays, lines)
}

// keepLast is the SQL expression of transport.AppendAttemptLine over v
// (history || line): v when it fits in transport.MaxAttemptErrors
// characters, else its last that many with the line they cut dropped.
func keepLast(v string) string {
	n := strconv.Itoa(transport.MaxAttemptErrors)
	tail := `right(` + v + `, ` + n + `)`
	return `CASE WHEN length(` + v + `) <= ` + n + ` THEN ` + v + `
		ELSE substr(` + tail + `, strpos(` + tail + `, E'\n') + 1) END`
}

// Release implements sqlqueue.Dialect.
func (Dialect) Release(q sqlqueue.Queue, refs []sqlqueue.Ref) sqlqueue.Stmt {
	ids, owners := refArrays(refs)
	return st(`UPDATE `+q.Table+` AS q
SET state = 0, owner = NULL, lease_until = NULL
FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[])) AS r(id, owner)
WHERE q.id = r.id AND q.owner = r.owner AND q.state + 0 = 1
RETURNING q.id`, ids, owners)
}

// DeadLetter implements sqlqueue.Dialect: one statement (a data-modifying
// CTE), atomic on its own.
func (Dialect) DeadLetter(n sqlqueue.Names, q sqlqueue.Queue, ref sqlqueue.Ref, reason string) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{st(`WITH d AS (
	DELETE FROM `+q.Table+`
	WHERE id = $1 AND owner = $2 AND state IN (1, 2)
	RETURNING id, uuid, headers, body, attempts, created_at
)
INSERT INTO `+n.Errors+` (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at)
SELECT $3, uuid, headers, body, attempts, $4, id, created_at FROM d
RETURNING original_id`, ref.ID, ref.Owner, q.Name, reason)}
}

// Recover implements sqlqueue.Dialect. Like Claim (and DeadLetterExpired,
// DropExpired) it selects ids into an array first, so that its generic
// plan stays an index scan.
func (Dialect) Recover(q sqlqueue.Queue, maxAttempts, limit int) sqlqueue.Stmt {
	return st(`UPDATE `+q.Table+` AS q
SET state = 0, owner = NULL, lease_until = NULL
WHERE q.id = ANY(ARRAY(
	SELECT id FROM `+q.Table+`
	WHERE state <> 0 AND lease_until < now() AND (state = 1 OR $1 <= 0 OR attempts < $1)
	LIMIT $2
	FOR UPDATE SKIP LOCKED
))
RETURNING q.id`, maxAttempts, limit)
}

// DeadLetterExpired implements sqlqueue.Dialect.
func (Dialect) DeadLetterExpired(n sqlqueue.Names, q sqlqueue.Queue, maxAttempts int, reason string, limit int) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{st(`WITH d AS (
	DELETE FROM `+q.Table+`
	WHERE id = ANY(ARRAY(
		SELECT id FROM `+q.Table+`
		WHERE state = 2 AND lease_until < now() AND attempts >= $1
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	))
	RETURNING id, uuid, headers, body, attempts, created_at
)
INSERT INTO `+n.Errors+` (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at)
SELECT $3, uuid, headers, body, attempts, $4, id, created_at FROM d
RETURNING original_id`, maxAttempts, limit, q.Name, reason)}
}

// DropExpired implements sqlqueue.Dialect.
func (Dialect) DropExpired(q sqlqueue.Queue, limit int) sqlqueue.Stmt {
	return st(`DELETE FROM `+q.Table+`
WHERE id = ANY(ARRAY(
	SELECT id FROM `+q.Table+`
	WHERE state = 0 AND expires_at IS NOT NULL AND expires_at <= now()
	LIMIT $1
	FOR UPDATE SKIP LOCKED
))
RETURNING id`, limit)
}

// Listen implements sqlqueue.Notifier with LISTEN on WakeChannel. The
// wake-up leadership of a queue is a session-level advisory lock on the
// listening connection (pg_try_advisory_lock, never waiting), so it ends
// with the session when a process dies.
func (Dialect) Listen(ctx context.Context, conn *sql.Conn, s *sqlqueue.WakeSession) error {
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(pgxConn)
		if !ok {
			return fmt.Errorf("postgres: LISTEN needs the pgx stdlib driver, got %T", dc)
		}
		pc := sc.Conn()
		listening := false
		lead := func(ctx context.Context, take, give []string) (map[string]bool, error) {
			tables := append(append([]string(nil), take...), give...)
			taking := make([]bool, len(tables))
			for i := range take {
				taking[i] = true
			}
			rows, err := pc.Query(ctx, leadSQL, tables, taking)
			if err != nil {
				return nil, err
			}
			held := map[string]bool{}
			for rows.Next() {
				var (
					table string
					ok    bool
				)
				if err := rows.Scan(&table, &ok); err != nil {
					rows.Close()
					return nil, err
				}
				if ok {
					held[table] = true
				}
			}
			return held, rows.Err()
		}
		for {
			wctx, cancel, err := s.Elect(ctx, lead)
			if err != nil {
				return err
			}
			if want := s.Listening(); want != listening {
				// A follower does not listen: PostgreSQL signals every
				// listening session of the database on each notifying
				// commit.
				stmt := "UNLISTEN " + WakeChannel
				if want {
					stmt = "LISTEN " + WakeChannel
				}
				if _, err := pc.Exec(ctx, stmt); err != nil {
					cancel()
					return err
				}
				if listening = want; listening {
					s.Listened()
				}
			}
			n, err := pc.WaitForNotification(wctx)
			cancel()
			if err != nil {
				if ctx.Err() == nil && wctx.Err() != nil && !pc.IsClosed() {
					continue // the wait ended for the next election pass
				}
				return err
			}
			s.Wake(n.Payload)
		}
	})
}

// leadSQL takes (taking true) or gives up (false) the wake-up leadership
// of each queue table, in one statement for a whole election pass: one row
// per table, true where the lock was taken. The key space is apart from
// Lock's by its ":wake:" infix.
const leadSQL = `SELECT r.t, CASE WHEN r.taking
	THEN pg_try_advisory_lock(hashtextextended(current_schema() || ':wake:' || r.t, 0))
	ELSE pg_advisory_unlock(hashtextextended(current_schema() || ':wake:' || r.t, 0)) AND false END
FROM unnest((SELECT $1::text[]), (SELECT $2::bool[])) AS r(t, taking)`

// IsMissingTable implements sqlqueue.MissingTableClassifier (SQLSTATE
// 42P01, undefined_table).
func (Dialect) IsMissingTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// SharedLock implements sqlqueue.ParkingDialect: the shared mode of Lock's
// advisory lock (the same key space).
func (Dialect) SharedLock(key string) sqlqueue.Stmt {
	return st(`SELECT true FROM (SELECT pg_advisory_xact_lock_shared(hashtextextended(current_schema() || ':' || $1, 0))) AS l`, key)
}

// Register implements sqlqueue.ParkingDialect. The default-reader check
// reads the snapshot before the insert, which adds a row of another group.
func (Dialect) Register(n sqlqueue.Names, q sqlqueue.Queue) sqlqueue.Stmt {
	return st(`WITH ins AS (
	INSERT INTO `+n.Subscriptions+` (topic, consumer_group, queue_table) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING topic
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM `+n.Subscriptions+` WHERE topic = $1 AND consumer_group = '') THEN 0 ELSE 1 END FROM ins`,
		q.Topic, q.Group, q.Name)
}

// CopyParked implements sqlqueue.ParkingDialect.
func (Dialect) CopyParked(from, to sqlqueue.Queue) sqlqueue.Stmt {
	return st(`INSERT INTO ` + to.Table + ` (uuid, headers, body, created_at, due_at, expires_at, ordering_key)
SELECT uuid, headers, body, created_at, due_at, expires_at, ordering_key FROM ` + from.Table + `
WHERE state = 0 AND (expires_at IS NULL OR expires_at > now())
ORDER BY id`)
}

// PruneParked implements sqlqueue.ParkingDialect: the limit oldest rows by
// primary key, of which those pending and past the retention go.
func (Dialect) PruneParked(n sqlqueue.Names, q sqlqueue.Queue, retention time.Duration, limit int) sqlqueue.Stmt {
	return st(`DELETE FROM `+q.Table+`
WHERE id = ANY(ARRAY(
	SELECT id FROM (SELECT id, state, created_at FROM `+q.Table+` ORDER BY id LIMIT $1) AS o
	WHERE o.state = 0 AND o.created_at < now() - $2 * interval '1 millisecond'
		AND NOT EXISTS (SELECT 1 FROM `+n.Subscriptions+` WHERE topic = $3 AND consumer_group = '')
))
AND state = 0
RETURNING id`, limit, sqlqueue.Millis(retention), q.Topic)
}

// CompleteCommit implements sqlqueue.SettleCommitter: the settlement of
// the one row a handler's transaction settles, by its primary key (no
// array to unnest, a plan as small as the statement: the batched
// Complete's generic plan scanned small queue tables), which fails when
// the row is no longer the lease's, so that Connector's connections send
// it together with COMMIT (commitMarker). The failure is a cast that
// cannot succeed (LeaseLost), not a constant one, which the planner would
// fold and raise for every row.
func (Dialect) CompleteCommit(q sqlqueue.Queue, ref sqlqueue.Ref) sqlqueue.Stmt {
	return st(commitMarker+`WITH d AS (
	DELETE FROM `+q.Table+` WHERE id = $1 AND owner = $2 AND state + 0 = 2 RETURNING id
)
SELECT CAST(CASE count(*) WHEN 1 THEN '1' ELSE '`+leaseLostText+`' END AS int) FROM d`, ref.ID, ref.Owner)
}
