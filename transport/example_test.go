package transport_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/mem"
)

// The URL picks the transport; a problem in it is an error that names it.
func ExampleOpenSubscriber() {
	ctx := context.Background()
	_, err := transport.OpenSubscriber(ctx, "kafka://broker:9092")
	fmt.Println(errors.Is(err, transport.ErrUnknownScheme))

	_, err = transport.OpenSubscriber(ctx, "mem://orders?concurrency=many")
	fmt.Println(err)

	sub, err := transport.OpenSubscriber(ctx, "mem://orders?concurrency=4&max_attempts=5")
	fmt.Println(err)
	_ = sub.Close()
	// Output:
	// true
	// mem: berth: invalid config: parameter "concurrency": "many" is not an integer from 1 to 1048576
	// <nil>
}
