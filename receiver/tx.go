package receiver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// handlerTx is a flight's handler transaction (transport.TxFromContext):
// begun when the handler first asks for it, then committed with the
// message's ack (settleTx) or rolled back by every other end.
//
// On SQLite the transaction holds the process's only connection, so it is
// rolled back before any other settlement of its message (a nack's retry,
// a hand-back) would wait for that connection.
type handlerTx struct {
	mu   sync.Mutex
	tx   *sql.Tx
	shut bool // no new transaction: the message is settled or handed back
	// committed: CommitTx settled the message (err its outcome); its ack
	// or nack then settles nothing.
	committed bool
	err       error
}

var errTxSettled = fmt.Errorf("berth: the message is already settled: %w", sql.ErrTxDone)

// Tx implements handlertx.Binder: the flight's transaction, begun on first
// use on the source's database. Its life is bounded by the stage's settle
// context, not the message context: the message context ends when user
// code acks, before the transaction commits.
func (f *flight) Tx(context.Context) (*sql.Tx, error) {
	r := f.r
	if r.txs == nil {
		return nil, fmt.Errorf("%w: the subscriber's transport cannot settle a message inside a SQL transaction (only postgres, sqlite and sqlserver can)", transport.ErrTxUnsupported)
	}
	h := &f.htx
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.shut:
		return nil, errTxSettled
	case h.tx != nil:
		return h.tx, nil
	}
	var (
		tx  *sql.Tx
		err error
	)
	if p := guard.Call(func() { tx, err = r.txs.BeginTx(r.settleCtx, f.d) }); p != nil {
		r.recordFault("begin handler transaction", p)
		return nil, fmt.Errorf("berth: begin the handler transaction: %w", guard.PanicError(p))
	}
	if err != nil {
		return nil, err
	}
	h.tx = tx
	return tx, nil
}

// Commit implements handlertx.Binder (transport.CommitTx): the message is
// settled inside its transaction now, begun empty if the handler never
// asked for it. A second call reports the first one's outcome.
func (f *flight) Commit(ctx context.Context) error {
	if _, err := f.Tx(ctx); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	h := &f.htx
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.committed:
		return h.err
	case h.tx == nil: // shut: settled some other way
		return errTxSettled
	}
	tx := h.tx
	h.tx, h.shut = nil, true
	h.committed, h.err = true, f.r.completeTx(f.d, f.msg, tx)
	return h.err
}

// settleTx shuts the flight's transaction for its settlement, in one
// lock: committed reports that CommitTx settled the message already (err
// its outcome); otherwise the open transaction, if any, is returned for
// an ack to commit, or rolled back before any other settlement (on SQLite
// it holds the connection that settlement needs).
func (f *flight) settleTx(ack bool) (tx *sql.Tx, committed bool, err error) {
	h := &f.htx
	h.mu.Lock()
	if h.committed {
		h.mu.Unlock()
		return nil, true, h.err
	}
	tx = h.tx
	h.tx, h.shut = nil, true
	h.mu.Unlock()
	if !ack && tx != nil {
		f.rollback(tx)
		tx = nil
	}
	return tx, false, nil
}

// committedTx reports whether CommitTx settled the message.
func (f *flight) committedTx() bool {
	h := &f.htx
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.committed
}

// rollbackTx rolls the open transaction back, if any; with reopen, a
// later attempt of the message (an in-place retry) may begin a new one,
// else none may.
func (f *flight) rollbackTx(reopen bool) {
	h := &f.htx
	h.mu.Lock()
	tx := h.tx
	h.tx = nil
	if !h.committed {
		h.shut = !reopen
	}
	h.mu.Unlock()
	if tx != nil {
		f.rollback(tx)
	}
}

// rollback rolls tx back. A failure means its connection is gone (the
// server rolled it back) or will be discarded: nothing is left to undo.
func (f *flight) rollback(tx *sql.Tx) {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		f.r.logDebug("rolling back a handler transaction failed", watermill.LogFields{"id": f.d.ID, "err": err.Error()})
	}
}

// afterTx is the outcome of a settlement inside the handler's transaction
// (the ack's, or CommitTx's, whatever the handler returned after it):
// acked when it committed; nothing more to do when the lease was lost
// (another consumer owns the message); otherwise retried, since nothing
// is known to have committed.
func (f *flight) afterTx(err error) transport.Outcome {
	switch {
	case err == nil:
		f.acked = true
		return transport.OutcomeAcked
	case errors.Is(err, transport.ErrLeaseLost):
		return transport.OutcomeAcked
	}
	return f.r.nack(f.d, f.msg, "the handler transaction did not commit: "+err.Error())
}

// completeTx acks d inside tx and commits it (TxSettler.CompleteTx). A
// lost lease is the handler's to learn (CommitTx) or the log's; any other
// failure leaves the message to the caller to retry.
func (r *stage) completeTx(d *transport.Delivery, msg *message.Message, tx *sql.Tx) error {
	ctx, cancel := r.callCtx()
	defer cancel()
	defer func() { _ = tx.Rollback() }() // after a panic; ErrTxDone otherwise
	start := time.Now()
	err := r.guarded("ack", func() error { return r.txs.CompleteTx(ctx, d, tx) })
	r.settled(transport.SettleAck, msg, 1, start, err)
	switch {
	case errors.Is(err, transport.ErrLeaseLost):
		r.logError("lease lost before the handler transaction committed; it was rolled back, and the message belongs to another consumer", err,
			watermill.LogFields{"id": d.ID})
	case err != nil:
		r.logError("the handler transaction did not commit; the message is retried", err, watermill.LogFields{"id": d.ID})
	}
	return err
}
