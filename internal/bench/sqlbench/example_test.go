package sqlbench_test

import (
	"fmt"
	"strings"

	"github.com/berth-go/berth/internal/bench"
	_ "github.com/berth-go/berth/internal/bench/sqlbench"
)

// Importing the package registers its scenarios; `berth bench` runs them on
// PostgreSQL, on SQL Server, or on both, whichever is configured, and
// sql/idle and sql/ordered on PostgreSQL alone.
func Example() {
	for _, s := range bench.Scenarios() {
		switch {
		case !strings.HasPrefix(s.Name, "sql/"):
		case len(s.Needs) > 0:
			fmt.Println(s.Name, "needs", s.Needs)
		default:
			fmt.Println(s.Name, "needs one of", s.NeedsOneOf)
		}
	}
	// Output:
	// sql/drain needs one of [postgres sqlserver]
	// sql/idle needs [postgres]
	// sql/ordered needs [postgres]
	// sql/steady needs one of [postgres sqlserver]
}
