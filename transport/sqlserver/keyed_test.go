package sqlserver_test

import (
	"testing"

	"github.com/berth-go/berth/transport/transporttest"
)

// TestContractKeyed runs Watermill's suite with an ordering key on every
// message and order per key declared as guaranteed, against the SQL Server
// at BERTH_TEST_SQLSERVER_URL (skipped without it).
func TestContractKeyed(t *testing.T) {
	transporttest.RunWatermillKeyed(t, contractConfig(t))
}
