package sqlbench_test

import (
	"fmt"
	"strings"

	"github.com/berth-go/berth/internal/bench"
	_ "github.com/berth-go/berth/internal/bench/sqlbench"
)

// Importing the package registers its scenarios; `berth bench` runs them on
// PostgreSQL, on SQL Server, or on both, whichever is configured.
func Example() {
	for _, s := range bench.Scenarios() {
		if strings.HasPrefix(s.Name, "sql/") {
			fmt.Println(s.Name, "needs one of", s.NeedsOneOf)
		}
	}
	// Output:
	// sql/drain needs one of [postgres sqlserver]
	// sql/steady needs one of [postgres sqlserver]
}
