package sqlite

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// Dialect is the SQLite dialect: every statement of the transport on SQLite
// is in this file except the sweeper's DeadLetterStray (stray.go); it also
// classifies errors (transient.go). Times are stored as integer Unix
// milliseconds, taken from the process clock (the database is local) and
// passed as arguments, so every statement of one transaction sees one
// "now". Writes are serialised by SQLite itself, so claims need no SKIP
// LOCKED, and the cluster lock is the transaction (BEGIN IMMEDIATE).
type Dialect struct {
	// Now returns the current time; nil is time.Now. For tests.
	Now func() time.Time
}

var (
	_ sqlqueue.Dialect                = Dialect{}
	_ sqlqueue.MissingTableClassifier = Dialect{}
	_ sqlqueue.MultiProber            = Dialect{}
	_ sqlqueue.DirectDialect          = Dialect{}
	_ sqlqueue.Limiter                = Dialect{}
	_ sqlqueue.QueueUpgrader          = Dialect{}
	_ sqlqueue.HeadPromoter           = Dialect{}
)

// MaxOrderingKeyLength is the longest ordering key, in bytes
// (transport.MetadataOrderingKey): keys are indexed, and a publish with a
// longer one fails with transport.ErrInvalidMessage.
const MaxOrderingKeyLength = 255

// Limits implements sqlqueue.Limiter: only the ordering key is bounded.
func (Dialect) Limits() sqlqueue.Limits {
	return sqlqueue.Limits{OrderingKey: MaxOrderingKeyLength}
}

func (d Dialect) now() int64 {
	if d.Now != nil {
		return d.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// Name implements sqlqueue.Dialect.
func (Dialect) Name() string { return "sqlite" }

// PrepareStatements implements sqlqueue.PreparedDialect: SQLite parses a
// statement each time it runs unless it was prepared.
func (Dialect) PrepareStatements() bool { return true }

// MessagingSystem is the messaging.system that package telemetry reports
// for SQLite queue tables (sqlqueue.MessagingSystem of this dialect): the
// OpenTelemetry conventions define no value for them.
const MessagingSystem = "berth.sqlite"

// QuoteIdent implements sqlqueue.Dialect.
func (Dialect) QuoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

func st(sql string, args ...any) sqlqueue.Stmt { return sqlqueue.Stmt{SQL: sql, Args: args} }

// Lock implements sqlqueue.Dialect: transactions begin IMMEDIATE (the
// database's one write lock), so holding a transaction is holding the lock.
func (Dialect) Lock(string, bool) sqlqueue.Stmt { return st(`SELECT 1`) }

// VersionTable implements sqlqueue.Dialect.
func (Dialect) VersionTable(n sqlqueue.Names) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{st(`CREATE TABLE IF NOT EXISTS ` + n.Version + ` (
	version    INTEGER NOT NULL PRIMARY KEY,
	applied_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
)`)}
}

// SchemaVersion implements sqlqueue.Dialect.
func (Dialect) SchemaVersion(n sqlqueue.Names) sqlqueue.Stmt {
	return st(`SELECT coalesce(max(version), 0) FROM ` + n.Version)
}

// SetSchemaVersion implements sqlqueue.Dialect.
func (Dialect) SetSchemaVersion(n sqlqueue.Names, v int) sqlqueue.Stmt {
	return st(`INSERT OR IGNORE INTO ` + n.Version + ` (version) VALUES (` + strconv.Itoa(v) + `)`)
}

// Migrations implements sqlqueue.Dialect.
func (d Dialect) Migrations(n sqlqueue.Names) []sqlqueue.Migration {
	return []sqlqueue.Migration{{Version: 1, Stmts: []sqlqueue.Stmt{
		st(`CREATE TABLE IF NOT EXISTS ` + n.Subscriptions + ` (
	topic          TEXT    NOT NULL,
	consumer_group TEXT    NOT NULL,
	queue_table    TEXT    NOT NULL,
	created_at     INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
	PRIMARY KEY (topic, consumer_group)
)`),
		st(`CREATE TABLE IF NOT EXISTS ` + n.Errors + ` (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	queue_table  TEXT    NOT NULL,
	message_uuid TEXT    NOT NULL,
	headers      TEXT    NOT NULL,
	body         BLOB    NOT NULL,
	attempts     INTEGER NOT NULL,
	reason       TEXT    NOT NULL,
	original_id  INTEGER NOT NULL,
	created_at   INTEGER NOT NULL,
	failed_at    INTEGER NOT NULL
)`),
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(n.ErrorsName+"_queue") + ` ON ` + d.QuoteIdent(n.ErrorsName) + ` (queue_table, failed_at)`),
	}}, {Version: 2, Stmts: []sqlqueue.Stmt{
		// Version 2 adds the ordering key to queue tables. SQLite cannot
		// add a column idempotently in SQL, so each queue table gets it
		// at its first use (UpgradeQueue); the version tells older builds
		// the tables changed. This statement only keeps the migration
		// non-empty in the printed DDL.
		st(`SELECT 1`),
	}}}
}

// UpgradeQueue implements sqlqueue.QueueUpgrader: a table made before
// version 2 gets the ordering_key column (CreateQueue then adds its
// index).
func (Dialect) UpgradeQueue(q sqlqueue.Queue) []sqlqueue.QueueUpgrade {
	lacks := func(col string) sqlqueue.Stmt {
		return st(`SELECT EXISTS (SELECT 1 FROM pragma_table_info(?)) AND NOT EXISTS (SELECT 1 FROM pragma_table_info(?) WHERE name = ?)`, q.Name, q.Name, col)
	}
	return []sqlqueue.QueueUpgrade{
		{Probe: lacks("ordering_key"), Upgrade: []sqlqueue.Stmt{st(`ALTER TABLE ` + q.Table + ` ADD COLUMN ordering_key TEXT`)}},
		{Probe: lacks("waiting"), Upgrade: []sqlqueue.Stmt{st(`ALTER TABLE ` + q.Table + ` ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0`)}},
	}
}

// CreateQueue implements sqlqueue.Dialect. AUTOINCREMENT keeps ids from
// being reused after the newest row is deleted.
func (d Dialect) CreateQueue(q sqlqueue.Queue) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{
		st(`CREATE TABLE IF NOT EXISTS ` + q.Table + ` (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	uuid        TEXT    NOT NULL,
	headers     TEXT    NOT NULL,
	body        BLOB    NOT NULL,
	state       INTEGER NOT NULL DEFAULT 0,
	owner       INTEGER,
	attempts    INTEGER NOT NULL DEFAULT 0,
	created_at  INTEGER NOT NULL,
	due_at      INTEGER NOT NULL,
	lease_until INTEGER,
	expires_at  INTEGER,
	ordering_key TEXT,
	waiting     INTEGER NOT NULL DEFAULT 0
)`),
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(q.Name+"_pending") + ` ON ` + d.QuoteIdent(q.Name) + ` (due_at, id) WHERE state = 0`),
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(q.Name+"_leased") + ` ON ` + d.QuoteIdent(q.Name) + ` (lease_until) WHERE state <> 0`),
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(q.Name+"_expiry") + ` ON ` + d.QuoteIdent(q.Name) + ` (expires_at) WHERE state = 0 AND expires_at IS NOT NULL`),
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(q.Name+"_key") + ` ON ` + d.QuoteIdent(q.Name) + ` (ordering_key, id) WHERE ordering_key IS NOT NULL`),
		// The claim's index: pending rows less the keyed rows waiting
		// behind their key's head (see Insert).
		st(`CREATE INDEX IF NOT EXISTS ` + d.QuoteIdent(q.Name+"_ready") + ` ON ` + d.QuoteIdent(q.Name) + ` (due_at, id) WHERE state = 0 AND waiting = 0`),
	}
}

// Subscribe implements sqlqueue.Dialect.
func (Dialect) Subscribe(n sqlqueue.Names, q sqlqueue.Queue) sqlqueue.Stmt {
	return st(`INSERT OR IGNORE INTO `+n.Subscriptions+` (topic, consumer_group, queue_table) VALUES (?, ?, ?)`,
		q.Topic, q.Group, q.Name)
}

// Subscriptions implements sqlqueue.Dialect.
func (Dialect) Subscriptions(n sqlqueue.Names, topic string) sqlqueue.Stmt {
	return st(`SELECT queue_table FROM `+n.Subscriptions+` WHERE topic = ? ORDER BY consumer_group`, topic)
}

// insertChunk keeps an INSERT under SQLite's bound-parameter limit.
const insertChunk = 500

// Insert implements sqlqueue.Dialect: one multi-row INSERT per 500 rows.
//
// A keyed row goes in waiting (out of the claim's index, <table>_ready)
// when an earlier row of its key is in the table: for the first row of a
// key in this insert, a seek of the key index (the rows of earlier
// statements; SQLite runs one writer at a time, so the answer is exact
// until the commit); for the others, always (the first one is there). A
// delayed row is never waiting: the claims' head check orders it.
//
// Which of these a row is travels as an argument (insertWaiting), not in the
// text, so the text depends on the number of rows only and a prepared
// insert serves every batch of that size: with the choice written into
// the text, each keyed batch was a text of its own, parsed every time and
// crowding the claims out of the statement cache.
func (d Dialect) Insert(q sqlqueue.Queue, rows []sqlqueue.InsertRow) []sqlqueue.Stmt {
	now := d.now()
	var out []sqlqueue.Stmt
	seen := map[string]bool{}
	row := "(?, ?, ?, ?, ?, ?, ?, " + insertWaiting(q) + ")"
	for start := 0; start < len(rows); start += insertChunk {
		chunk := rows[start:min(start+insertChunk, len(rows))]
		var b strings.Builder
		b.WriteString(`INSERT INTO ` + q.Table + ` (uuid, headers, body, created_at, due_at, expires_at, ordering_key, waiting) VALUES `)
		args := make([]any, 0, 10*len(chunk))
		for i, r := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(row)
			var expires, key any
			if r.TTL > 0 {
				expires = now + sqlqueue.Millis(r.TTL)
			}
			if r.OrderingKey != "" {
				key = r.OrderingKey
			}
			wait := waitNever
			switch {
			case key == nil:
			case r.Delay > 0:
				// Never waiting: a hand-off that finds it at its key's
				// head before it is due leaves it (ClaimKeys), and the
				// full claim must then see it when it falls due.
				seen[r.OrderingKey] = true
			case seen[r.OrderingKey]:
				wait = waitAlways
			default:
				seen[r.OrderingKey] = true
				wait = waitIfKeyed
			}
			args = append(args, r.UUID, string(r.Headers), r.Body, now, now+sqlqueue.Millis(r.Delay), expires, key, wait, key)
		}
		out = append(out, st(b.String(), args...))
	}
	return out
}

// An inserted row's waiting marker (Insert): never, always, or when its
// key already has a row in the table.
const (
	waitNever   = 0
	waitAlways  = 1
	waitIfKeyed = 2
)

// insertWaiting is an inserted row's waiting value from two arguments: its
// wait (waitNever, …) and its key again.
func insertWaiting(q sqlqueue.Queue) string {
	return `CASE ? WHEN 1 THEN 1 WHEN 2 THEN EXISTS (SELECT 1 FROM ` + q.Table + ` AS k WHERE k.ordering_key = ?) ELSE 0 END`
}

// The claims' limits are written "LIMIT ? + 0", never "LIMIT ?": SQLite
// reads a bare parameter's bound value into the plan of a prepared
// statement (for its LIMIT optimisation) and marks the statement expired
// whenever that parameter is bound to another value, so every claim
// whose free permits differed from the last one's was parsed and planned
// again (about 180 µs for ClaimDirect; a third of a keyed drain's claim
// time). An expression is not read that way; the plan is the same.
// TestClaimLimitNotReprepared checks it.

// Claim implements sqlqueue.Dialect. A keyed row is claimed only when no
// row of its key has a lower id (one seek of the key index), whatever that
// row's state: the head of a key blocks it until settled. Writes are
// serialised (one write transaction at a time), so ids are in commit order
// and no two claims run at once: the check is exact without locks.
func (d Dialect) Claim(q sqlqueue.Queue, owner int64, n int, fetchTimeout time.Duration) sqlqueue.Stmt {
	now := d.now()
	return st(`UPDATE `+q.Table+`
SET state = 1, owner = ?, lease_until = ?, waiting = 0
WHERE id IN (
	SELECT p.id FROM `+q.Table+` AS p
	WHERE p.state = 0 AND p.waiting = 0 AND p.due_at <= ? AND (p.expires_at IS NULL OR p.expires_at > ?)
	  AND (p.ordering_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM `+q.Table+` AS e WHERE e.ordering_key = p.ordering_key AND e.id < p.id))
	ORDER BY p.due_at, p.id
	LIMIT ? + 0
)
RETURNING id, uuid, headers, body, attempts`,
		owner, now+sqlqueue.Millis(fetchTimeout), now, now, n)
}

// ClaimDirect implements sqlqueue.DirectDialect: Claim's row choice,
// materialized once, of which the first direct rows (the oldest due) are
// set to processing as Begin would, the rest to fetched, in one statement.
func (d Dialect) ClaimDirect(q sqlqueue.Queue, owner int64, n, direct int, fetchTimeout, lease time.Duration) sqlqueue.Stmt {
	return d.claimDirect(q, `
	SELECT p.id, p.due_at FROM `+q.Table+` AS p
	WHERE p.state = 0 AND p.waiting = 0 AND p.due_at <= ?1 AND (p.expires_at IS NULL OR p.expires_at > ?1)
	  AND (p.ordering_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM `+q.Table+` AS e WHERE e.ordering_key = p.ordering_key AND e.id < p.id))
	ORDER BY p.due_at, p.id
	LIMIT ?2 + 0
`, owner, n, direct, fetchTimeout, lease)
}

// ClaimKeys implements sqlqueue.KeyClaimer: ClaimDirect over the heads of
// the given keys only — per key, its lowest id (one seek of the key
// index), claimed when pending and due, waiting or not — so the hand-off
// of a settled key's next row reads one row per key, not the backlog.
// Writes are serialised, so the head is exact as in Claim. done is always
// empty (SQLite is no AckRider); keys travel as one JSON array, so the
// statement text is the same for any number of keys. It ignores the keys'
// bounds (from): a deleted row leaves SQLite's key index at once, so a
// seek passes no settled rows. A head it does not
// claim keeps its marker: one not due yet was inserted delayed, which is
// never waiting (see Insert); the keys past the ?2 rows stay freed for the
// source's next claim (claimKeyRows); the sweeper promotes what is left
// (PromoteHeads).
func (d Dialect) ClaimKeys(q sqlqueue.Queue, owner int64, keys []string, _ []int64, n, direct int, fetchTimeout, lease time.Duration, _ []sqlqueue.Ref) sqlqueue.Stmt {
	js, _ := json.Marshal(keys) // strings always marshal
	st := d.claimDirect(q, `
	SELECT p.id, p.due_at FROM `+q.Table+` AS p
	WHERE p.id IN (`+keyHeads(q)+`)
	  AND p.state = 0 AND p.due_at <= ?1 AND (p.expires_at IS NULL OR p.expires_at > ?1)
	ORDER BY p.due_at, p.id
	LIMIT ?2 + 0
`, owner, n, direct, fetchTimeout, lease)
	st.Args = append(st.Args, string(js))
	return st
}

// keyHeads selects the lowest id of each key of the JSON array ?7.
func keyHeads(q sqlqueue.Queue) string {
	return `SELECT (SELECT e.id FROM ` + q.Table + ` AS e WHERE e.ordering_key = k.value ORDER BY e.id LIMIT 1) FROM json_each(?7) AS k`
}

// PromoteHeads implements sqlqueue.HeadPromoter: per key, its first row,
// when waiting and pending; at most ?1 rows. The first ?2 keys
// (promoteWalk) are found one seek each, skipping from key to key (a
// recursive walk), the keys after them by one pass over the rest of the
// key index. It holds the write lock while it runs: the pass alone read
// the whole key index, 23 ms for 10 keys × 20,000 rows against 0.4 ms
// walked (TestPromoteHeadsSkipsBacklog); with many keys of a few rows
// each the walk stops at promoteWalk and the pass reads what it read
// before.
func (Dialect) PromoteHeads(q sqlqueue.Queue, limit int) sqlqueue.Stmt {
	return st(`WITH RECURSIVE walk(k, n) AS (
	SELECT (SELECT ordering_key FROM `+q.Table+` WHERE ordering_key IS NOT NULL ORDER BY ordering_key LIMIT 1), 1
	UNION ALL
	SELECT (SELECT ordering_key FROM `+q.Table+` WHERE ordering_key > walk.k ORDER BY ordering_key LIMIT 1), walk.n + 1
	FROM walk WHERE walk.k IS NOT NULL AND walk.n < ?2
), heads(id) AS (
	SELECT (SELECT id FROM `+q.Table+` WHERE ordering_key = walk.k ORDER BY id LIMIT 1) FROM walk WHERE walk.k IS NOT NULL
	UNION ALL
	SELECT min(id) FROM `+q.Table+` WHERE ordering_key > (SELECT k FROM walk WHERE n = ?2) GROUP BY ordering_key
)
UPDATE `+q.Table+` SET waiting = 0
WHERE id IN (
	SELECT w.id FROM heads JOIN `+q.Table+` AS w ON w.id = heads.id
	WHERE w.waiting = 1 AND w.state = 0
	LIMIT ?1)
RETURNING id`, limit, promoteWalk)
}

// promoteWalk is how many keys PromoteHeads finds by a seek each before it
// reads the rest of the key index in one pass.
const promoteWalk = 1000

// claimDirect is ClaimDirect's statement around a row choice (c: id and
// due_at of at most ?2 rows, ?1 being now).
func (d Dialect) claimDirect(q sqlqueue.Queue, choice string, owner int64, n, direct int, fetchTimeout, lease time.Duration) sqlqueue.Stmt {
	now := d.now()
	return st(`WITH c AS MATERIALIZED (`+choice+`), s AS MATERIALIZED (SELECT id FROM c ORDER BY due_at, id LIMIT ?3 + 0)
UPDATE `+q.Table+`
SET state = CASE WHEN id IN (SELECT id FROM s) THEN 2 ELSE 1 END,
	owner = ?4,
	waiting = 0,
	attempts = attempts + CASE WHEN id IN (SELECT id FROM s) THEN 1 ELSE 0 END,
	lease_until = CASE WHEN id IN (SELECT id FROM s) THEN ?5 ELSE ?6 END
WHERE id IN (SELECT id FROM c)
RETURNING id, uuid, headers, body, attempts, state`,
		now, n, direct, owner, now+sqlqueue.Millis(lease), now+sqlqueue.Millis(fetchTimeout))
}

// ReleaseDirect implements sqlqueue.DirectDialect.
func (Dialect) ReleaseDirect(q sqlqueue.Queue, rs []sqlqueue.Ref) sqlqueue.Stmt {
	return fenced(rs, `UPDATE `+q.Table+` SET state = 0, owner = NULL, lease_until = NULL, attempts = max(attempts - 1, 0)`, "2", "id")
}

// MultiProbe implements sqlqueue.MultiProber: per queue, two seeks of the
// ready index (pending rows not waiting behind their key's head) and one
// of the primary key, as one UNION ALL. Queue names are engine-made
// identifiers ([a-z0-9_]), written as literals; the only argument is now.
func (d Dialect) MultiProbe(qs []sqlqueue.Queue) sqlqueue.Stmt {
	var b strings.Builder
	for i, q := range qs {
		if i > 0 {
			b.WriteString("\nUNION ALL\n")
		}
		fmt.Fprintf(&b, `SELECT '%s',
	EXISTS (SELECT 1 FROM %[2]s WHERE state = 0 AND waiting = 0 AND due_at <= ?1 AND (expires_at IS NULL OR expires_at > ?1)),
	(SELECT min(due_at) - ?1 FROM %[2]s WHERE state = 0 AND waiting = 0 AND due_at > ?1),
	NOT EXISTS (SELECT 1 FROM %[2]s)`, strings.ReplaceAll(q.Name, "'", "''"), q.Table)
	}
	return st(b.String(), d.now())
}

// refs returns "(?, ?), (?, ?)" and the ids and owners as arguments,
// padded with NULL pairs to a size class (padded).
func refs(rs []sqlqueue.Ref) (string, []any) {
	args := make([]any, 0, 2*padded(len(rs)))
	for _, r := range rs {
		args = append(args, r.ID, r.Owner)
	}
	return valuesOf("(?, ?)", padded(len(rs)), 2, args)
}

// padded is the number of rows a settlement of n rows lists: n rounded up
// to a power of two. Its text then depends on that size class alone, so
// the 256 sizes of a settlement batch make 9 texts, each prepared once and
// kept (sqlqueue's statement cache); listed one row each, they crowded the
// cache and were parsed again and again (about 4% of a drain's CPU,
// profiled). The padding rows are NULL, which no row of the table
// matches; TestSettlementTextsBySizeClass.
func padded(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// valuesOf writes rows copies of row, comma-separated, and pads args,
// width arguments a row, with NULLs up to rows rows.
func valuesOf(row string, rows, width int, args []any) (string, []any) {
	var b strings.Builder
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	for len(args) < rows*width {
		args = append(args, nil)
	}
	return b.String(), args
}

// fenced builds "WITH r(id, owner) AS (VALUES …) <stmt> WHERE state = s AND
// (id, owner) IN (SELECT id, owner FROM r) RETURNING …"; args go after the
// refs.
func fenced(rs []sqlqueue.Ref, head, state, returning string, args ...any) sqlqueue.Stmt {
	values, refArgs := refs(rs)
	return st(`WITH r(id, owner) AS (VALUES `+values+`)
`+head+`
WHERE state = `+state+` AND (id, owner) IN (SELECT id, owner FROM r)
RETURNING `+returning, append(refArgs, args...)...)
}

// Begin implements sqlqueue.Dialect.
func (d Dialect) Begin(q sqlqueue.Queue, rs []sqlqueue.Ref, lease time.Duration) sqlqueue.Stmt {
	return fenced(rs, `UPDATE `+q.Table+` SET state = 2, attempts = attempts + 1, lease_until = ?`, "1", "id, attempts",
		d.now()+sqlqueue.Millis(lease))
}

// Complete implements sqlqueue.Dialect.
func (Dialect) Complete(q sqlqueue.Queue, rs []sqlqueue.Ref) sqlqueue.Stmt {
	return fenced(rs, `DELETE FROM `+q.Table, "2", "id")
}

// Renew implements sqlqueue.Dialect.
func (d Dialect) Renew(q sqlqueue.Queue, rs []sqlqueue.Ref, lease time.Duration) sqlqueue.Stmt {
	return fenced(rs, `UPDATE `+q.Table+` SET lease_until = ?`, "2", "id", d.now()+sqlqueue.Millis(lease))
}

// Retry implements sqlqueue.Dialect. Headers that are not a valid JSON
// object keep their text (no attempt line), so that one row cannot fail
// its batch.
func (d Dialect) Retry(q sqlqueue.Queue, rows []sqlqueue.RetryRef) sqlqueue.Stmt {
	now := d.now()
	args := make([]any, 0, 4*padded(len(rows)))
	for _, r := range rows {
		args = append(args, r.ID, r.Owner, now+sqlqueue.Millis(r.Delay), r.Line)
	}
	values, args := valuesOf("(?, ?, ?, ?)", padded(len(rows)), 4, args)
	const path = `'$.` + transport.MetadataAttemptErrors + `'`
	v := `coalesce(json_extract(q.headers, ` + path + `), '') || r.line`
	n := strconv.Itoa(transport.MaxAttemptErrors)
	tail := `substr(` + v + `, -` + n + `)`
	return st(`WITH r(id, owner, due_at, line) AS (VALUES `+values+`)
UPDATE `+q.Table+` AS q SET state = 0, owner = NULL, lease_until = NULL, due_at = r.due_at,
	headers = CASE WHEN NOT json_valid(q.headers) THEN q.headers
		WHEN json_type(q.headers) <> 'object' THEN q.headers
		ELSE json_set(q.headers, `+path+`, CASE WHEN length(`+v+`) <= `+n+` THEN `+v+`
			ELSE substr(`+tail+`, instr(`+tail+`, char(10)) + 1) END) END
FROM r
WHERE q.state = 2 AND q.id = r.id AND q.owner = r.owner
RETURNING id`, args...)
}

// Release implements sqlqueue.Dialect.
func (Dialect) Release(q sqlqueue.Queue, rs []sqlqueue.Ref) sqlqueue.Stmt {
	return fenced(rs, `UPDATE `+q.Table+` SET state = 0, owner = NULL, lease_until = NULL`, "1", "id")
}

// DeadLetter implements sqlqueue.Dialect: copy, then delete, in one
// transaction (SQLite has no data-modifying CTEs).
func (d Dialect) DeadLetter(n sqlqueue.Names, q sqlqueue.Queue, ref sqlqueue.Ref, reason string) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{
		st(`INSERT INTO `+n.Errors+` (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at, failed_at)
SELECT ?, uuid, headers, body, attempts, ?, id, created_at, ? FROM `+q.Table+`
WHERE id = ? AND owner = ? AND state IN (1, 2)`, q.Name, reason, d.now(), ref.ID, ref.Owner),
		st(`DELETE FROM `+q.Table+` WHERE id = ? AND owner = ? AND state IN (1, 2) RETURNING id`, ref.ID, ref.Owner),
	}
}

// Recover implements sqlqueue.Dialect.
func (d Dialect) Recover(q sqlqueue.Queue, maxAttempts, limit int) sqlqueue.Stmt {
	return st(`UPDATE `+q.Table+`
SET state = 0, owner = NULL, lease_until = NULL
WHERE id IN (
	SELECT id FROM `+q.Table+`
	WHERE state <> 0 AND lease_until < ? AND (state = 1 OR ? <= 0 OR attempts < ?)
	LIMIT ?
)
RETURNING id`, d.now(), maxAttempts, maxAttempts, limit)
}

// DeadLetterExpired implements sqlqueue.Dialect: both statements select the
// same rows (same now, same order, inside one write transaction).
func (d Dialect) DeadLetterExpired(n sqlqueue.Names, q sqlqueue.Queue, maxAttempts int, reason string, limit int) []sqlqueue.Stmt {
	now := d.now()
	sel := `SELECT id FROM ` + q.Table + ` WHERE state <> 0 AND state = 2 AND lease_until < ? AND attempts >= ? ORDER BY lease_until, id LIMIT ?`
	return []sqlqueue.Stmt{
		st(`INSERT INTO `+n.Errors+` (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at, failed_at)
SELECT ?, uuid, headers, body, attempts, ?, id, created_at, ? FROM `+q.Table+`
WHERE id IN (`+sel+`)`, q.Name, reason, now, now, maxAttempts, limit),
		st(`DELETE FROM `+q.Table+` WHERE id IN (`+sel+`) RETURNING id`, now, maxAttempts, limit),
	}
}

// DropExpired implements sqlqueue.Dialect.
func (d Dialect) DropExpired(q sqlqueue.Queue, limit int) sqlqueue.Stmt {
	return st(`DELETE FROM `+q.Table+`
WHERE id IN (SELECT id FROM `+q.Table+` WHERE state = 0 AND expires_at IS NOT NULL AND expires_at <= ? LIMIT ?)
RETURNING id`, d.now(), limit)
}

// IsMissingTable implements sqlqueue.MissingTableClassifier.
func (Dialect) IsMissingTable(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && strings.Contains(se.Error(), "no such table")
}

// SharedLock implements sqlqueue.ParkingDialect: as Lock, the transaction
// itself (BEGIN IMMEDIATE) is the lock.
func (Dialect) SharedLock(string) sqlqueue.Stmt { return st(`SELECT 1`) }

// Register implements sqlqueue.ParkingDialect: the insert returns a row
// only when it inserted one (no conflict on the primary key).
func (Dialect) Register(n sqlqueue.Names, q sqlqueue.Queue) sqlqueue.Stmt {
	return st(`INSERT INTO `+n.Subscriptions+` (topic, consumer_group, queue_table)
SELECT ?1, ?2, ?3 WHERE NOT EXISTS (SELECT 1 FROM `+n.Subscriptions+` WHERE topic = ?1 AND consumer_group = ?2)
RETURNING CASE WHEN EXISTS (SELECT 1 FROM `+n.Subscriptions+` WHERE topic = ?1 AND consumer_group = '') THEN 0 ELSE 1 END`,
		q.Topic, q.Group, q.Name)
}

// CopyParked implements sqlqueue.ParkingDialect.
func (d Dialect) CopyParked(from, to sqlqueue.Queue) sqlqueue.Stmt {
	return st(`INSERT INTO `+to.Table+` (uuid, headers, body, created_at, due_at, expires_at, ordering_key)
SELECT uuid, headers, body, created_at, due_at, expires_at, ordering_key FROM `+from.Table+`
WHERE state = 0 AND (expires_at IS NULL OR expires_at > ?)
ORDER BY id`, d.now())
}

// PruneParked implements sqlqueue.ParkingDialect: the limit oldest rows by
// primary key, of which those pending and past the retention go.
func (d Dialect) PruneParked(n sqlqueue.Names, q sqlqueue.Queue, retention time.Duration, limit int) sqlqueue.Stmt {
	return st(`DELETE FROM `+q.Table+`
WHERE id IN (
	SELECT id FROM (SELECT id, state, created_at FROM `+q.Table+` ORDER BY id LIMIT ?1)
	WHERE state = 0 AND created_at < ?2
		AND NOT EXISTS (SELECT 1 FROM `+n.Subscriptions+` WHERE topic = ?3 AND consumer_group = '')
)
RETURNING id`, limit, d.now()-sqlqueue.Millis(retention), q.Topic)
}
