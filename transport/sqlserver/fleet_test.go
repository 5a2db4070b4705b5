package sqlserver_test

import (
	"testing"

	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
	"github.com/berth-go/berth/transport/sqlserver"
)

// TestFleet runs the fleet cases against the SQL Server at
// BERTH_TEST_SQLSERVER_URL, each in a schema of its own; without the
// variable they skip.
func TestFleet(t *testing.T) {
	sqlqueuetest.RunFleet(t, sqlqueuetest.Harness{Dialect: sqlserver.Dialect{}, Open: openSchema})
}
