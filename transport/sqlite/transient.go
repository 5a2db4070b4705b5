package sqlite

import (
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/berth-go/berth/transport/sqlqueue"
)

var _ sqlqueue.TransientClassifier = Dialect{}

// IsTransient implements sqlqueue.TransientClassifier: SQLITE_BUSY
// (another connection, in this process or another, held the database's
// write lock past the busy timeout) and SQLITE_LOCKED (a table locked by
// another statement of the same connection, or of the shared cache), with
// their extended codes (SQLITE_BUSY_SNAPSHOT, SQLITE_LOCKED_SHAREDCACHE, …).
func (Dialect) IsTransient(err error) bool { return busy(err) }

// NotCommitted implements sqlqueue.TransientClassifier: the same errors as
// IsTransient: a statement that failed with SQLITE_BUSY or SQLITE_LOCKED
// did not run (its transaction could not take the lock it needed). The
// database is a local file: there is no connection to lose mid-statement.
func (Dialect) NotCommitted(err error) bool { return busy(err) }

func busy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff { // the primary code of an extended one
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}
