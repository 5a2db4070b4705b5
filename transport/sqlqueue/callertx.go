package sqlqueue

// CallerTxDialect is implemented by dialects whose statements differ when
// they run inside a transaction the engine does not own: the caller's
// (Publisher.WithTx, transport.PublishInTx) or the handler's
// (transport.TxFromContext, committed by Source.CompleteTx). SQL Server
// sets READ COMMITTED at the head of its own batches, since a pooled
// connection may carry another isolation level; inside a caller's
// transaction the level is the caller's choice, and these statements leave
// it alone. Without it, the engine runs Insert and Complete there (and
// PostgreSQL settles with SettleCommitter).
type CallerTxDialect interface {
	// InsertInTx is Insert, for a caller's transaction.
	InsertInTx(q Queue, rows []InsertRow) []Stmt
	// CompleteInTx is Complete, for the handler's transaction.
	CompleteInTx(q Queue, refs []Ref) Stmt
}

// insertInTx returns d's statements inserting rows into q inside a
// caller's transaction.
func insertInTx(d Dialect, q Queue, rows []InsertRow) []Stmt {
	if c, ok := d.(CallerTxDialect); ok {
		return c.InsertInTx(q, rows)
	}
	return d.Insert(q, rows)
}

// completeInTx returns d's Complete for the handler's transaction.
func completeInTx(d Dialect, q Queue, refs []Ref) Stmt {
	if c, ok := d.(CallerTxDialect); ok {
		return c.CompleteInTx(q, refs)
	}
	return d.Complete(q, refs)
}

// A SettleCommitter settles the row of a handler's transaction with a
// statement that fails when the row is no longer the lease's, rather than
// touching no row: so that the driver may send the transaction's COMMIT
// together with it, unread (PostgreSQL: postgres.Connector's connections
// pipeline them, one round trip instead of two). The engine runs it with
// ExecContext in the handler's transaction, then commits; on any other
// connection the Commit sends the COMMIT as usual.
type SettleCommitter interface {
	// CompleteCommit returns the statement settling ref's row.
	CompleteCommit(q Queue, ref Ref) Stmt
	// LeaseLost reports whether err is CompleteCommit's failure for a row
	// that is no longer the lease's.
	LeaseLost(err error) bool
}
