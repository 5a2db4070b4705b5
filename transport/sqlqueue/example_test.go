package sqlqueue_test

import (
	"fmt"

	"github.com/berth-go/berth/transport/sqlqueue"
)

func ExampleQueueTableName() {
	fmt.Println(sqlqueue.QueueTableName(sqlqueue.DefaultTablePrefix, "orders", ""))
	fmt.Println(sqlqueue.QueueTableName(sqlqueue.DefaultTablePrefix, "orders", "billing"))
	// Output:
	// berth_q_orders
	// berth_q_orders__billing
}
