// Package wait holds Berth's one "wait for a group or the context" helper.
package wait

import (
	"context"
	"sync"
)

// Group waits until wg's counter is zero or ctx is done, whichever comes
// first; it returns ctx.Err() in the second case.
// When ctx ends first, one goroutine waits on for wg and exits with it: the
// caller still owns what wg counts and must make it finish.
func Group(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
