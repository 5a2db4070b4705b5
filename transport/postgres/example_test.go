package postgres_test

import (
	"fmt"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The DDL for DBAs who create tables by hand.
func ExampleDialect() {
	ddl := sqlqueue.DDL(postgres.Dialect{}, sqlqueue.Tables{}, sqlqueue.QueueRef{Topic: "orders"})
	fmt.Println(len(ddl) > 0)
	// Output: true
}
