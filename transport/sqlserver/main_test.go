package sqlserver

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql's connection opener lives as long as a pool; pools
		// are closed, but its goroutine exits asynchronously.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}
