// Package handlertx carries a delivered message's handler transaction
// between the receive pipeline (package receiver), which binds it to the
// message context, and the public accessors in package transport
// (TxFromContext, CommitTx). Users never import it.
package handlertx

import (
	"context"
	"database/sql"
)

// Key is the message-context key whose value is the delivery's Binder.
type Key struct{}

// A Binder is the handler transaction of one delivered message: begun on
// first use, committed with the message's settlement.
type Binder interface {
	// Tx returns the message's transaction, beginning it on first use.
	Tx(ctx context.Context) (*sql.Tx, error)
	// Commit settles the message inside its transaction and commits both
	// now, or reports why it could not (transport.ErrLeaseLost: the lease
	// is gone and the transaction was rolled back).
	Commit(ctx context.Context) error
}

// From returns the Binder in ctx, or nil.
func From(ctx context.Context) Binder {
	if ctx == nil {
		return nil
	}
	b, _ := ctx.Value(Key{}).(Binder)
	return b
}
