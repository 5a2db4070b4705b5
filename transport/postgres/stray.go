package postgres

import "github.com/berth-go/berth/transport/sqlqueue"

// DeadLetterStray implements sqlqueue.Dialect: one data-modifying CTE, like
// DeadLetterExpired, atomic on its own, with the reason computed from each
// row's state. A fetched or processing row is stray without a lease or
// without an owner: no claim leaves either, and a lease an hour ahead with
// no owner would wait out that hour for nobody.
//
// Index: every stray row has state <> 0, so it is in the lease index
// (lease_until) WHERE state <> 0, negative states included, and the inner
// select repeats that filter so the partial index matches, generic plan or
// not. The "lease_until IS NULL" arm alone could be an index condition; with
// the "owner IS NULL" and "state NOT IN (1, 2)" arms (neither column is in
// the index) the select reads
// the whole lease index instead: every fetched and processing row, never
// the pending backlog. That is a few buffers' worth of rows per queue; an
// empty partial index on the stray predicate would make it nothing (see
// the docs).
func (Dialect) DeadLetterStray(n sqlqueue.Names, q sqlqueue.Queue, limit int) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{st(`WITH d AS (
	DELETE FROM `+q.Table+`
	WHERE id = ANY(ARRAY(
		SELECT id FROM `+q.Table+`
		WHERE state <> 0 AND (lease_until IS NULL OR owner IS NULL OR state NOT IN (1, 2))
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	))
	RETURNING id, uuid, headers, body, attempts, created_at, state, lease_until, owner
)
INSERT INTO `+n.Errors+` (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at)
SELECT $2, uuid, headers, body, attempts,
	CASE WHEN state NOT IN (1, 2) THEN 'stray row: state ' || state || ' is not a known state'
	     WHEN lease_until IS NULL THEN 'stray row: state ' || state || ' with no lease'
	     ELSE 'stray row: state ' || state || ' with no owner' END,
	id, created_at FROM d
RETURNING original_id`, limit, q.Name)}
}
