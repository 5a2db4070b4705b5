package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/internal/handlertx"
	"github.com/berth-go/berth/transport"
)

// maxKey is the longest key the inbox table holds (SQL Server's
// NVARCHAR(400)).
const maxKey = 400

// An Inbox records handled messages in a table of the user's database, in
// the handler's transaction. It is safe for concurrent use; Close stops
// its pruning.
type Inbox struct {
	cfg Config
	st  statements

	handled, skipped atomic.Int64

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// New validates cfg, creates the inbox table if it is missing and starts
// pruning it. ctx bounds the table's creation.
func New(ctx context.Context, cfg Config) (*Inbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Dialect == "" {
		return nil, fmt.Errorf("%w: inbox.Config: Dialect: cannot tell the dialect of driver %T; set it", transport.ErrInvalidConfig, cfg.DB.Driver())
	}
	i := &Inbox{cfg: cfg, st: statementsFor(cfg.Dialect, cfg.Table), stop: make(chan struct{}), done: make(chan struct{})}
	if _, err := cfg.DB.ExecContext(ctx, i.st.create); err != nil {
		return nil, fmt.Errorf("inbox: create %s: %w", cfg.Table, err)
	}
	if cfg.PruneInterval > 0 {
		go i.pruneLoop()
	} else {
		close(i.done)
	}
	return i, nil
}

// Middleware is a Watermill router middleware (router.AddMiddleware, or
// per handler): it runs each message's handler once, in a transaction
// that records the message's key (see the package documentation). The
// handler finds the transaction with transport.TxFromContext.
func (i *Inbox) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		key := i.cfg.Key(msg)
		switch {
		case key == "":
			return nil, fmt.Errorf("inbox: message %s has an empty key", msg.UUID)
		case len(key) > maxKey:
			return nil, fmt.Errorf("inbox: the key of message %s is %d bytes long, longer than %d", msg.UUID, len(key), maxKey)
		}
		tx, err := i.cfg.DB.BeginTx(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("inbox: begin: %w", err)
		}
		b := &binder{tx: tx}
		defer b.rollback() // a no-op once committed; also on a panic
		res, err := tx.ExecContext(ctx, i.st.record, i.st.recordArgs(key, time.Now())...)
		if err != nil {
			return nil, fmt.Errorf("inbox: record %q in %s: %w", key, i.cfg.Table, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, fmt.Errorf("inbox: record %q in %s: %w", key, i.cfg.Table, err)
		} else if n == 0 {
			i.skipped.Add(1) // handled before: ack it, run nothing
			return nil, nil
		}
		msg.SetContext(context.WithValue(ctx, handlertx.Key{}, b))
		out, err := h(msg)
		msg.SetContext(ctx)
		if err != nil {
			return out, err
		}
		if err := b.Commit(ctx); err != nil {
			return nil, fmt.Errorf("inbox: commit %q: %w", key, err)
		}
		i.handled.Add(1)
		return out, nil
	}
}

// Handled returns how many messages this Inbox's middleware handled and
// committed; Skipped, how many it acked without running the handler
// because their key was recorded.
func (i *Inbox) Handled() int64 { return i.handled.Load() }

// Skipped: see Handled.
func (i *Inbox) Skipped() int64 { return i.skipped.Load() }

// Prune deletes the keys handled more than Config.Retention ago and
// returns how many.
func (i *Inbox) Prune(ctx context.Context) (int64, error) {
	res, err := i.cfg.DB.ExecContext(ctx, i.st.prune, i.st.pruneArgs(i.cfg.Retention, time.Now())...)
	if err != nil {
		return 0, fmt.Errorf("inbox: prune %s: %w", i.cfg.Table, err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

func (i *Inbox) pruneLoop() {
	defer close(i.done)
	t := time.NewTicker(i.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-i.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		go func() { // Close cancels a prune in progress
			select {
			case <-i.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		n, err := i.Prune(ctx)
		cancel()
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			guard.Do(func() { i.cfg.Logger.Error("inbox: prune failed", err, nil) })
		case n > 0:
			guard.Do(func() {
				i.cfg.Logger.Debug("inbox: pruned", watermill.LogFields{"table": i.cfg.Table, "pruned": n})
			})
		}
	}
}

// Close stops pruning and waits for a prune in progress, or for ctx. It
// is idempotent; the middleware keeps working after it.
func (i *Inbox) Close(ctx context.Context) error {
	i.closeOnce.Do(func() { close(i.stop) })
	select {
	case <-i.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("inbox: close: gave up waiting for a prune: %w", ctx.Err())
	}
}

// binder is a message's inbox transaction, as transport.TxFromContext and
// transport.CommitTx find it.
type binder struct {
	mu        sync.Mutex
	tx        *sql.Tx
	committed bool  // Commit ran
	err       error // its outcome
}

// Tx implements handlertx.Binder.
func (b *binder) Tx(context.Context) (*sql.Tx, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.committed {
		return nil, fmt.Errorf("inbox: the message's transaction is committed: %w", sql.ErrTxDone)
	}
	return b.tx, nil
}

// Commit implements handlertx.Binder: the key and the effects commit now
// (the handler learns the outcome); the middleware's commit after the
// handler then does nothing.
func (b *binder) Commit(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.committed {
		b.committed, b.err = true, b.tx.Commit()
	}
	return b.err
}

func (b *binder) rollback() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.committed {
		_ = b.tx.Rollback()
	}
}
