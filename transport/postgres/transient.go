package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berth-go/berth/transport/sqlqueue"
)

var _ sqlqueue.TransientClassifier = Dialect{}

// transientStates are the SQLSTATEs after which the same statement run
// again may succeed, each with whether it guarantees the statement took no
// effect (see NotCommitted). Class 08 (connection exception) is transient
// too, without that guarantee.
var transientStates = map[string]bool{
	"40001": true,  // serialization_failure: the transaction was rolled back
	"40P01": true,  // deadlock_detected: the transaction was rolled back
	"55P03": true,  // lock_not_available (lock_timeout, NOWAIT): the statement failed
	"57P03": true,  // cannot_connect_now: the server is starting up, refused at connect
	"53300": true,  // too_many_connections: refused at connect
	"57P01": false, // admin_shutdown: the session was terminated
	"57P02": false, // crash_shutdown: the session was terminated
}

// IsTransient implements sqlqueue.TransientClassifier: a PgError whose
// SQLSTATE is a serialization failure (40001), a deadlock (40P01), a lock
// not available (55P03), a server shutting down or starting (57P01, 57P02,
// 57P03), too many connections (53300) or a connection exception (class
// 08); or, without a PgError, a connection that could not be made or was
// lost (pgconn.ConnectError, pgconn.SafeToRetry, sqlqueue.ConnectionLost).
// A statement timeout or a cancelled context is not transient.
func (Dialect) IsTransient(err error) bool {
	if err == nil || pgconn.Timeout(err) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		_, ok := transientStates[pe.Code]
		return ok || strings.HasPrefix(pe.Code, "08")
	}
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.SafeToRetry(err) || sqlqueue.ConnectionLost(err)
}

// NotCommitted implements sqlqueue.TransientClassifier: a serialization
// failure, a deadlock or a lock not available, which rolled the statement
// back; a connection refused by the server (57P03, 53300) or that could not
// be made (pgconn.ConnectError); or an error pgx raised before sending
// anything (pgconn.SafeToRetry, sqlqueue.NotSent). Not a connection lost
// mid-statement, nor a terminated session: the statement may have
// committed.
func (Dialect) NotCommitted(err error) bool {
	if err == nil || pgconn.Timeout(err) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return transientStates[pe.Code]
	}
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.SafeToRetry(err) || sqlqueue.NotSent(err)
}
