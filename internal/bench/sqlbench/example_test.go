package sqlbench_test

import (
	"fmt"
	"strings"

	"github.com/berth-go/berth/internal/bench"
	_ "github.com/berth-go/berth/internal/bench/sqlbench"
)

// Importing the package registers its scenarios; `berth bench` runs them.
func Example() {
	for _, s := range bench.Scenarios() {
		if strings.HasPrefix(s.Name, "sql/") {
			fmt.Println(s.Name, s.Needs)
		}
	}
	// Output:
	// sql/drain [postgres]
	// sql/steady [postgres]
}
