package all_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append([]goleak.Option{
		// database/sql's connection opener lives as long as a pool; pools
		// are closed, but its goroutine exits asynchronously.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		// The AWS SDK's HTTP transport keeps idle keep-alive connections.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	}, testenv.WatermillSuiteLeaks...)...)
}
