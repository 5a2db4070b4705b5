package sqlserver

import "github.com/berth-go/berth/transport/sqlqueue"

// strayVar is deadLetterVar with the state, which the reason is computed
// from.
const strayVar = `DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NOT NULL, body varbinary(max) NOT NULL, attempts int NOT NULL, created_at datetime2(3) NOT NULL, state tinyint NOT NULL, lease_until datetime2(3) NULL);
`

// strayReason is the error-table reason of a stray row, from its state and
// lease.
const strayReason = `CASE WHEN state > 2 THEN CONCAT(N'stray row: state ', state, N' is not a known state') WHEN lease_until IS NULL THEN CONCAT(N'stray row: state ', state, N' with no lease') ELSE CONCAT(N'stray row: state ', state, N' with no owner') END`

// DeadLetterStray implements sqlqueue.Dialect: one batch, atomic on its own
// (XACT_ABORT and an explicit transaction, as DeadLetterExpired), that
// deletes through a table variable and copies to the error table with each
// row's reason. The queue name is the only string argument, declared
// nvarchar(max) like every other (see Plan reuse).
//
// Index: state is a tinyint (0 to 255), so every stray row has state > 0
// and is in the lease index (lease_until) INCLUDE (attempts, state) WHERE
// state > 0; the predicate repeats that filter literally, so the index
// qualifies. "lease_until IS NULL" alone would be a seek; "state > 2"
// cannot be (state is included, not a key), so the statement scans the
// filtered index: every fetched and processing row, each filtered on the
// state the index carries, with a key lookup only for the rows it moves,
// never the pending backlog. The scan is pinned (strayHints): on a plan
// compiled while the table was empty, the optimizer could otherwise pick
// the clustered index, that is the whole queue, for every later sweep.
// The form is the other sweeps' (DELETE TOP … FROM, the hints on the
// FROM's table, since a DELETE's target takes no INDEX hint) rather than a
// DELETE through a CTE, which Babelfish does not run (issue 37 item 10);
// on SQL Server both are a Top over the pinned index scan. The
// "owner IS NULL" arm (a fetched or processing row no claim owns: its
// lease, however far ahead, is waited out for nobody) costs a key lookup
// per leased row, since owner is not in the index either: a buffer's worth
// of rows per queue and sweep.
func (Dialect) DeadLetterStray(n sqlqueue.Names, q sqlqueue.Queue, limit int) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{st(headLocking+`SET XACT_ABORT ON;
`+strayVar+`BEGIN TRANSACTION;
DELETE TOP (@p1) q
OUTPUT deleted.id, deleted.uuid, deleted.headers, deleted.body, deleted.attempts, deleted.created_at, deleted.state, deleted.lease_until INTO @t
FROM `+q.Table+` AS q`+strayHints(q.Name+"_leased")+`
WHERE q.state > 0 AND (q.lease_until IS NULL OR q.owner IS NULL OR q.state > 2);
`+copyToErrors(n.Errors, "@p2", strayReason), int64(limit), nv(q.Name))}
}

// strayHints are sweepHints without FORCESEEK: the stray predicate
// ("lease_until IS NULL OR owner IS NULL OR state > 2") has no seek
// predicate on the lease index's key, so the pin is a scan of that
// filtered index.
func strayHints(index string) string {
	return ` WITH (INDEX(` + Dialect{}.QuoteIdent(index) + `), UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)`
}
