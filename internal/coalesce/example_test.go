package coalesce_test

import (
	"context"
	"fmt"

	"github.com/berth-go/berth/internal/coalesce"
)

func ExampleNew() {
	deletes := coalesce.New(func(ctx context.Context, ids []int64) []error {
		// One DELETE … WHERE id = ANY($1) for the whole batch.
		fmt.Println("flush", ids)
		return nil
	}, 256)
	_ = deletes.Do(context.Background(), 42)
	_ = deletes.Close(context.Background())
	// Output: flush [42]
}
