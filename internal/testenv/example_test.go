package testenv_test

import (
	"fmt"
	"strings"

	"github.com/berth-go/berth/internal/testenv"
)

// In an integration test:
//
//	func TestOrders(t *testing.T) {
//		dsn := testenv.PostgresSchemaURL(t) // skips, or fails under CI, without PostgreSQL
//		queue := testenv.UniqueName("orders")
//		...
//	}
func ExampleUniqueName() {
	name := testenv.UniqueName("Orders-Queue")
	fmt.Println(strings.HasPrefix(name, "orders_queue_"), len(name) <= testenv.MaxNameLen)
	// Output: true true
}

func ExampleWithSearchPath() {
	u, err := testenv.WithSearchPath("postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "t_abc")
	if err != nil {
		panic(err)
	}
	fmt.Println(u)
	// Output: postgres://postgres@127.0.0.1:5432/test?search_path=t_abc&sslmode=disable
}
