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

// takeTx returns the open transaction for the ack to commit, or nil, and
// shuts the flight's transaction either way.
func (f *flight) takeTx() *sql.Tx {
	h := &f.htx
	h.mu.Lock()
	defer h.mu.Unlock()
	tx := h.tx
	h.tx, h.shut = nil, true
	return tx
}

// committedTx reports whether CommitTx settled the message, and how.
func (f *flight) committedTx() (bool, error) {
	h := &f.htx
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.committed, h.err
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
		if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			// Its connection is gone (the server rolled it back) or
			// will be discarded: nothing is left to undo.
			f.r.logDebug("rolling back a handler transaction failed", watermill.LogFields{"id": f.d.ID, "err": err.Error()})
		}
	}
}

// settleCommitted ends a flight whose message CommitTx settled: an ack or
// a nack then changes nothing, except that a commit that failed (not for
// a lost lease) is retried, since nothing is known to have committed.
func (f *flight) settleCommitted(err error) transport.Outcome {
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
