package transport

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/handlertx"
)

// ErrTxUnsupported is returned by PublishInTx for a publisher that cannot
// publish inside a SQL transaction (mem, SQS, or a decorator that does not
// pass the capability on), and by TxFromContext and CommitTx for a message
// whose subscriber cannot settle it inside one (mem, SQS: use
// inbox.Middleware, in package github.com/berth-go/berth/inbox).
var ErrTxUnsupported = errors.New("berth: no SQL transaction for this publisher or message")

// A TxPublisher publishes inside the caller's SQL transaction (the
// transactional outbox): the messages become visible when, and only if,
// the transaction commits. The SQL transports' publishers
// (*sqlqueue.Publisher: postgres, sqlite, sqlserver) implement it, and so
// does telemetry.Publisher's decorator of one, which instruments the
// transaction-bound publisher as it does its own.
//
// WithTx returns a publisher bound to tx; it is used while tx is open and
// its Close does not touch tx. tx must be a transaction on the database
// the publisher writes to.
type TxPublisher interface {
	WithTx(tx *sql.Tx) message.Publisher
}

// PublishInTx returns a publisher that publishes inside tx, from pub as
// OpenPublisher (or a SQL transport's NewPublisher) returned it, decorated
// or not: a business write and its messages then commit or roll back
// together. A publisher that cannot (mem, SQS) is an error wrapping
// ErrTxUnsupported; a nil tx one wrapping ErrInvalidConfig.
//
// On SQLite the process shares one connection, which tx holds, and a
// publisher's first publish in a transaction on a topic makes sure the
// topic's default queue exists on that same connection: it waits until
// the transaction ends. Publish once outside a transaction first, while
// the topic has no consumer group subscribed (which creates the queue), as
// the example does. PostgreSQL and SQL Server have no such constraint.
func PublishInTx(pub message.Publisher, tx *sql.Tx) (message.Publisher, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: PublishInTx: nil transaction", ErrInvalidConfig)
	}
	tp, ok := pub.(TxPublisher)
	if !ok {
		return nil, fmt.Errorf("%w: %T (only the SQL transports' publishers can)", ErrTxUnsupported, pub)
	}
	return tp.WithTx(tx), nil
}

// A DBPublisher is a publisher that writes to a SQL database: DB returns
// the pool it writes with. The SQL transports' publishers implement it,
// and so does telemetry.Publisher's decorator of one.
type DBPublisher interface {
	DB() *sql.DB
}

// DBOf returns the pool pub writes to, from pub as OpenPublisher (or a SQL
// transport's NewPublisher) returned it, decorated or not: the handle to
// begin the transactions given to PublishInTx on, with no second pool and
// no DSN to derive from a Berth URL. On SQLite it is the process's one
// shared connection of that file, which a transaction must use (another
// pool on the file would wait for the publisher's lock). The pool belongs
// to pub: use it while pub is open, and do not close it. A publisher with
// no SQL database (mem, SQS) is an error wrapping ErrTxUnsupported.
func DBOf(pub message.Publisher) (*sql.DB, error) {
	if dp, ok := pub.(DBPublisher); ok {
		if db := dp.DB(); db != nil {
			return db, nil
		}
	}
	return nil, fmt.Errorf("%w: %T has no SQL database (only the SQL transports' publishers do)", ErrTxUnsupported, pub)
}

// A TxSettler is a Source that can settle a delivery inside a SQL
// transaction its handler wrote in: the handler's transaction
// (TxFromContext). The SQL transports' sources implement it. The pipeline
// begins the transaction only when the handler asks for it, so messages
// whose handlers never do are settled as before.
type TxSettler interface {
	// BeginTx begins a transaction on the database that holds d's queue
	// table. ctx bounds the transaction's life (database/sql rolls it back
	// when ctx is done).
	BeginTx(ctx context.Context, d *Delivery) (*sql.Tx, error)

	// CompleteTx removes d inside tx, fenced by d's lease as Complete is,
	// and commits tx. When the lease is gone it rolls tx back and returns
	// ErrLeaseLost; on any other error tx is rolled back too, unless the
	// commit itself failed (its outcome is then unknown). Either way tx
	// is done when it returns.
	CompleteTx(ctx context.Context, d *Delivery, tx *sql.Tx) error
}

// TxFromContext returns the handler transaction of the message whose
// context ctx is (msg.Context(), or a context derived from it, as a
// Watermill router's handler receives): a transaction on the database of
// the message's queue table, begun on the first call and the same on every
// later one. It is watermill-sql's TxFromContext, begun lazily.
//
// Whatever the handler writes through it commits together with the
// message's ack, fenced by the message's lease: when the handler acks (a
// router handler returns nil), the pipeline deletes the message inside the
// transaction and commits, so the writes and the ack commit or fail
// together; when the lease was lost meanwhile (the handler ran past it and
// another consumer took the message), the transaction rolls back and the
// ack reports ErrLeaseLost. A nack, a handler error or a closing
// subscriber rolls the transaction back, and the message is retried or
// dead-lettered as usual. Messages published through PublishInTx(pub, tx)
// commit with it too (sends atomic with the receive). CommitTx commits
// before the handler returns, to learn the outcome.
//
// Handlers that never call TxFromContext pay nothing: their acks are
// batched as usual. The user's tables must be in the database of the
// subscriber's queue tables. Do not Commit or Rollback the transaction
// yourself, and on SQLite (one connection per process) publish and query
// only through it until the handler returns.
//
// Behind inbox.Middleware (any transport, effects in a SQL database) it
// returns the inbox's transaction instead, which commits with the
// message's key in the user's database before the ack.
//
// It returns an error wrapping ErrTxUnsupported for a message whose
// subscriber cannot settle inside a transaction (mem, SQS: use the inbox)
// or that did not come from a Berth subscriber; one wrapping sql.ErrTxDone once the
// message is settled; or the database's error when the transaction cannot
// begin.
func TxFromContext(ctx context.Context) (*sql.Tx, error) {
	b := handlertx.From(ctx)
	if b == nil {
		return nil, fmt.Errorf("%w: the context is not a message context of a SQL transport's subscriber (postgres, sqlite, sqlserver)", ErrTxUnsupported)
	}
	return b.Tx(ctx)
}

// CommitTx settles the message whose context ctx is inside its handler
// transaction (TxFromContext) and commits it now, while the handler still
// runs, so that it learns the outcome: nil means the handler's writes and
// the ack committed together, and the handler should return nil (the
// router's ack that follows finds the message settled); ErrLeaseLost means
// the lease was gone and everything rolled back (the message belongs to
// another consumer; return nil or an error, the outcome is the same). On
// any other error nothing is known to have committed: the message is
// retried whatever the handler returns. A handler that never called
// TxFromContext commits an empty transaction with the settlement.
func CommitTx(ctx context.Context) error {
	b := handlertx.From(ctx)
	if b == nil {
		return fmt.Errorf("%w: the context is not a message context of a SQL transport's subscriber (postgres, sqlite, sqlserver)", ErrTxUnsupported)
	}
	return b.Commit(ctx)
}
