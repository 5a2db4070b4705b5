package sqlserver

import (
	"errors"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/berth-go/berth/transport/sqlqueue"
)

var _ sqlqueue.TransientClassifier = Dialect{}

// transientErrors are the SQL Server and Azure SQL error numbers after which
// the same statement run again may succeed, each with whether it
// guarantees the statement took no effect (see NotCommitted).
var transientErrors = map[int32]bool{
	// The statement or its transaction was rolled back.
	1205: true, // chosen as deadlock victim; the transaction was rolled back
	1222: true, // lock request time out period exceeded; the statement was rolled back

	// Refused before anything ran: at login, or a request the server did
	// not accept.
	4060:  true, // cannot open the database requested by the login (fail-over)
	4221:  true, // login to a read-secondary failed waiting for versioning
	40501: true, // the service is currently busy (throttled)
	40613: true, // database not currently available (fail-over, reconfiguration)

	// The server may have run the statement before failing the session or
	// the request: transient, but an insert might have committed.
	40197: false, // the service encountered an error processing the request (fail-over)
	49918: false, // cannot process the request: not enough resources
	49919: false, // cannot process the create or update request: too many in progress
	49920: false, // cannot process the request: too many operations in progress
	10928: false, // resource ID limit reached (requests, sessions)
	10929: false, // minimum guarantee not met, resource limit reached
	233:   false, // connection established, then an error during login or on the pipe
	10053: false, // transport-level error: the connection was aborted
	10054: false, // transport-level error: the connection was reset by the peer
	10060: false, // transport-level error: the connection attempt timed out
	64:    false, // transport-level error: the specified network name is no longer available
}

// IsTransient implements sqlqueue.TransientClassifier: an mssql.Error (or
// any error in its All chain) whose number is one of the deadlock, lock
// timeout, Azure SQL fail-over and throttling or transport-level errors
// listed in transient.go, or a lost connection (driver.ErrBadConn, an
// unexpected end of stream, a reset connection; see
// sqlqueue.ConnectionLost).
func (Dialect) IsTransient(err error) bool {
	_, ok := transientNumber(err)
	return ok || sqlqueue.ConnectionLost(err)
}

// NotCommitted implements sqlqueue.TransientClassifier: a deadlock victim
// (1205) or a lock timeout (1222), whose statement was rolled back; an error
// raised before anything ran (40501 throttling; 4060, 4221 and 40613 at
// login during a fail-over); or a statement never sent (sqlqueue.NotSent).
// Not a connection lost mid-statement, nor 40197: the statement may have
// committed.
func (Dialect) NotCommitted(err error) bool {
	notCommitted, ok := transientNumber(err)
	return ok && notCommitted || sqlqueue.NotSent(err)
}

// transientNumber looks up the numbers of err's mssql.Error chain in
// transientErrors; ok is false when none is there. When several are, any
// that rolled the statement back makes notCommitted true.
func transientNumber(err error) (notCommitted, ok bool) {
	var e mssql.Error
	if !errors.As(err, &e) {
		return false, false
	}
	chain := e.All
	if len(chain) == 0 {
		chain = []mssql.Error{e}
	}
	for _, x := range chain {
		if nc, found := transientErrors[x.Number]; found {
			ok = true
			notCommitted = notCommitted || nc
		}
	}
	return notCommitted, ok
}
