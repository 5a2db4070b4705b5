package faults_test

import (
	"fmt"

	"github.com/berth-go/berth/internal/faults"
)

// Inject one panic at the ack point; the pipeline's guard records it as a
// fault.
func Example() {
	inj := faults.New().Panic(faults.Ack, 1)
	defer faults.Install(inj)()
	func() {
		defer func() { fmt.Println("recovered:", recover()) }()
		_ = faults.Hit(faults.Ack)
	}()
	fmt.Println(faults.Hit(faults.Ack), inj.Hits(faults.Ack))
	// Output:
	// recovered: faults: injected at ack
	// <nil> 1
}
