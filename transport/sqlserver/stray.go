package sqlserver

import "github.com/berth-go/berth/transport/sqlqueue"

// strayVar is deadLetterVar with the state, which the reason is computed
// from.
const strayVar = `DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NOT NULL, body varbinary(max) NOT NULL, attempts int NOT NULL, created_at datetime2(3) NOT NULL, state tinyint NOT NULL);
`

// strayReason is the error-table reason of a stray row, from its state.
const strayReason = `CASE WHEN state > 2 THEN CONCAT(N'stray row: state ', state, N' is not a known state') ELSE CONCAT(N'stray row: state ', state, N' with no lease') END`

// DeadLetterStray implements sqlqueue.Dialect: one batch, atomic on its own
// (XACT_ABORT and an explicit transaction, as DeadLetterExpired), that
// deletes through a table variable and copies to the error table with each
// row's reason.
//
// Index: state is a tinyint (0 to 255), so every stray row has state > 0
// and is in the lease index (lease_until) INCLUDE (attempts) WHERE
// state > 0; the predicate repeats that filter literally so the optimizer
// can match it. The "lease_until IS NULL" arm alone would be a seek on
// that index; the "state > 2" arm cannot be (state is neither a key nor
// included), so the statement reads the whole filtered index — every
// fetched and processing row, each with a key lookup for its state — but
// never the pending backlog. Including state in the index (INCLUDE
// (attempts, state)) would spare the lookups.
func (Dialect) DeadLetterStray(n sqlqueue.Names, q sqlqueue.Queue, limit int) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{st(headNow+`SET XACT_ABORT ON;
`+strayVar+`BEGIN TRANSACTION;
DELETE TOP (@p1) FROM `+q.Table+` WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
OUTPUT deleted.id, deleted.uuid, deleted.headers, deleted.body, deleted.attempts, deleted.created_at, deleted.state INTO @t
WHERE state > 0 AND (lease_until IS NULL OR state > 2);
`+copyToErrors(n.Errors, "@p2", strayReason), int64(limit), q.Name)}
}
