package sqlserver

import (
	"errors"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/berth-go/berth/transport/sqlqueue"
)

var (
	_ sqlqueue.TransientClassifier = Dialect{}
	_ sqlqueue.OutageClassifier    = Dialect{}
)

// transientError is how an error number is retried: whether it guarantees
// the statement took no effect (see NotCommitted), and whether it is an
// outage, waited out for seconds (see IsOutage), rather than a conflict or
// a lost connection, run again within 100 ms.
type transientError struct {
	notCommitted, outage bool
}

// transientErrors are the SQL Server and Azure SQL error numbers after which
// the same statement run again may succeed.
var transientErrors = map[int32]transientError{
	// The statement or its transaction was rolled back: a conflict with
	// another transaction, over in milliseconds.
	1205: {notCommitted: true}, // chosen as deadlock victim; the transaction was rolled back
	1222: {notCommitted: true}, // lock request time out period exceeded; the statement was rolled back

	// The statement was rolled back, and the server is short of lock
	// memory: an outage until the load falls.
	1204: {notCommitted: true, outage: true}, // cannot obtain a LOCK resource at this time

	// Refused before anything ran: at login, or a request the server did
	// not accept. A fail-over or throttling lasts seconds to a minute.
	4060:  {notCommitted: true, outage: true}, // cannot open the database requested by the login (fail-over)
	4221:  {notCommitted: true, outage: true}, // login to a read-secondary failed waiting for versioning
	40501: {notCommitted: true, outage: true}, // the service is currently busy (throttled); retry after 10 seconds
	40613: {notCommitted: true, outage: true}, // database not currently available (fail-over, reconfiguration)

	// The server may have run the statement before failing the session or
	// the request: transient, but an insert might have committed.
	40197: {outage: true}, // the service encountered an error processing the request (fail-over)
	40143: {outage: true}, // the service encountered an error processing the request
	40540: {outage: true}, // the service encountered an error processing the request
	49918: {outage: true}, // cannot process the request: not enough resources
	49919: {outage: true}, // cannot process the create or update request: too many in progress
	49920: {outage: true}, // cannot process the request: too many operations in progress
	10928: {outage: true}, // resource ID limit reached (requests, sessions)
	10929: {outage: true}, // minimum guarantee not met, resource limit reached
	233:   {},             // connection established, then an error during login or on the pipe
	10053: {},             // transport-level error: the connection was aborted
	10054: {},             // transport-level error: the connection was reset by the peer
	10060: {},             // transport-level error: the connection attempt timed out
	64:    {},             // transport-level error: the specified network name is no longer available
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
// (1205), a lock timeout (1222) or no lock memory (1204), whose statement
// was rolled back; an error raised before anything ran (40501 throttling;
// 4060, 4221 and 40613 at login during a fail-over); or a statement never
// sent (sqlqueue.NotSent). Not a connection lost mid-statement, nor 40197,
// 40143 or 40540: the statement may have committed.
func (Dialect) NotCommitted(err error) bool {
	c, ok := transientNumber(err)
	return ok && c.notCommitted || sqlqueue.NotSent(err)
}

// IsOutage implements sqlqueue.OutageClassifier: an Azure SQL fail-over or
// reconfiguration (40613, 40197, 40143, 40540, 4060, 4221), throttling
// (40501, 10928, 10929, 49918–49920) or no lock memory (1204). Settlements
// and publish inserts wait these out for seconds, up to their deadline;
// a deadlock victim, a lock timeout or a lost connection is run again
// within 100 ms, three times at most (a login that then fails during the
// fail-over is an outage again).
func (Dialect) IsOutage(err error) bool {
	c, ok := transientNumber(err)
	return ok && c.outage
}

// transientNumber looks up the numbers of err's mssql.Error chain in
// transientErrors; ok is false when none is there. When several are, any
// that rolled the statement back makes notCommitted true, and any outage
// makes outage true.
func transientNumber(err error) (c transientError, ok bool) {
	var e mssql.Error
	if !errors.As(err, &e) {
		return c, false
	}
	chain := e.All
	if len(chain) == 0 {
		chain = []mssql.Error{e}
	}
	for _, x := range chain {
		if found, in := transientErrors[x.Number]; in {
			ok = true
			c.notCommitted = c.notCommitted || found.notCommitted
			c.outage = c.outage || found.outage
		}
	}
	return c, ok
}
