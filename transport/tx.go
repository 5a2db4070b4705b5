package transport

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// ErrTxUnsupported is returned by PublishInTx for a publisher that cannot
// publish inside a SQL transaction: mem, SQS, or a decorator that does not
// pass the capability on.
var ErrTxUnsupported = errors.New("berth: publisher cannot publish inside a SQL transaction")

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
