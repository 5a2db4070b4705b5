package chaos_test

import (
	"fmt"

	"github.com/berth-go/berth/internal/chaos"
)

// The ledger counts by message id: a second handling is a duplicate, a
// published message never handled is lost, a poison message must be
// dead-lettered.
func ExampleLedger() {
	l := chaos.NewLedger()
	l.Published("m1", false)
	l.Published("m2", false)
	l.Published("m3", true) // poison
	l.Handled("m1")
	l.Handled("m1") // redelivered after a lost ack
	l.DeadLettered("m3")

	c := l.Counts()
	fmt.Println("lost", c.Lost, c.LostSample)
	fmt.Println("duplicates", c.Duplicates)
	fmt.Println("dead-lettered poison", c.DeadPoison, "of", c.Poison)
	// Output:
	// lost 1 [m2]
	// duplicates 1
	// dead-lettered poison 1 of 1
}
