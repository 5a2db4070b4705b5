package all_test

import (
	"fmt"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all"
)

// Importing the package registers every transport's scheme.
func Example() {
	fmt.Println(transport.Schemes())
	// Output: [mem postgres postgresql sqlite sqlserver sqs]
}
