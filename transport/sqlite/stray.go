package sqlite

import "github.com/berth-go/berth/transport/sqlqueue"

// strayReason is the error-table reason of a stray row, from its state.
const strayReason = `CASE WHEN state NOT IN (1, 2) THEN 'stray row: state ' || state || ' is not a known state'
	WHEN lease_until IS NULL THEN 'stray row: state ' || state || ' with no lease'
	WHEN typeof(lease_until) <> 'integer' THEN 'stray row: state ' || state || ' with a lease that is not a time'
	ELSE 'stray row: state ' || state || ' with no owner' END`

// strayPredicate selects the stray rows among those with state <> 0: an
// unknown state, or a fetched or processing row without a lease, with a
// lease that is not a time (a column holds any type: text sorts above
// every integer, so "lease_until < now" would never hold), or without an
// owner (no claim leaves one; a lease ahead would be waited out for
// nobody).
const strayPredicate = `(lease_until IS NULL OR typeof(lease_until) <> 'integer' OR owner IS NULL OR state NOT IN (1, 2))`

// DeadLetterStray implements sqlqueue.Dialect: copy, then delete, like
// DeadLetterExpired; both statements select the same rows (same
// predicate, same order, inside the sweep's write transaction).
//
// Index: every stray row has state <> 0, so it is in the lease index
// (lease_until) WHERE state <> 0, negative states included; the select
// repeats that filter so the partial index qualifies, and orders by the
// index's own order (lease_until, then rowid), so SQLite reads the index
// without sorting. Ordered by id alone, SQLite without ANALYZE statistics
// scans the whole table in rowid order instead. The "state NOT IN (1, 2)"
// arm cannot be an index condition (state is not in the index): the select
// reads every fetched and processing row's index entry, never the pending
// backlog.
func (d Dialect) DeadLetterStray(n sqlqueue.Names, q sqlqueue.Queue, limit int) []sqlqueue.Stmt {
	sel := `SELECT id FROM ` + q.Table + ` WHERE state <> 0 AND ` + strayPredicate + ` ORDER BY lease_until, id LIMIT ?`
	return []sqlqueue.Stmt{
		st(`INSERT INTO `+n.Errors+` (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at, failed_at)
SELECT ?, uuid, headers, body, attempts, `+strayReason+`, id, created_at, ? FROM `+q.Table+`
WHERE id IN (`+sel+`)`, q.Name, d.now(), limit),
		st(`DELETE FROM `+q.Table+` WHERE id IN (`+sel+`) RETURNING id`, limit),
	}
}
