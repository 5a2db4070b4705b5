package sqlite_test

import (
	"testing"

	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// TestFleet runs the fleet cases on a database file per case. SQLite has
// one pool per database file in a process, so the two "processes" of the
// pause case share it.
func TestFleet(t *testing.T) { sqlqueuetest.RunFleet(t, kitHarness()) }
