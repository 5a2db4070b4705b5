package coalesce_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/coalesce"
)

// Under the timer policy a full batch goes at once, several batches may be
// in flight together, and each caller gets its own item's outcome.
func TestTimerFullBatchesGoAtOnceAndOverlap(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan []int, 2)
	c := coalesce.NewTimer(func(_ context.Context, items []int) []error {
		entered <- append([]int(nil), items...)
		<-release
		errs := make([]error, len(items))
		for i, it := range items {
			if it%2 == 1 {
				errs[i] = fmt.Errorf("odd %d", it)
			}
		}
		return errs
	}, 3, time.Hour) // the linger never ends a batch here
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range 3 {
		wg.Go(func() { errs[i] = c.Do(context.Background(), i) })
	}
	first := <-entered // held in flight
	for i := 3; i < 6; i++ {
		wg.Go(func() { errs[i] = c.Do(context.Background(), i) })
	}
	second := <-entered // flushed while the first is still in flight
	close(release)
	wg.Wait()
	if len(first) != 3 || len(second) != 3 {
		t.Fatalf("batches %v and %v, want two of 3", first, second)
	}
	for i, err := range errs {
		if (i%2 == 1) != (err != nil) {
			t.Errorf("item %d: %v", i, err)
		}
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A partial batch goes when its first item has waited the linger.
func TestTimerLingerFlushesAPartialBatch(t *testing.T) {
	flushed := make(chan []int, 1)
	c := coalesce.NewTimer(func(_ context.Context, items []int) []error {
		flushed <- items
		return nil
	}, 10, time.Millisecond)
	defer func() { _ = c.Close(context.Background()) }()
	if err := c.Do(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	if got := <-flushed; len(got) != 1 || got[0] != 7 {
		t.Fatalf("flushed %v, want [7]", got)
	}
}

// Close sends what waits without lingering, then refuses new items.
func TestTimerCloseFlushesWhatWaits(t *testing.T) {
	var mu sync.Mutex
	var batches [][]int
	c := coalesce.NewTimer(func(_ context.Context, items []int) []error {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, items)
		return nil
	}, 10, time.Hour)
	done := make(chan error, 1)
	go func() { done <- c.Do(context.Background(), 1) }()
	waitQueued(t, c, 1)
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(batches) != 1 || len(batches[0]) != 1 {
		t.Fatalf("batches %v, want [[1]]", batches)
	}
	if err := c.Do(context.Background(), 2); !errors.Is(err, coalesce.ErrClosed) {
		t.Fatalf("Do after Close = %v, want ErrClosed", err)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// A Close whose context ends first cancels the flushes in flight, waits for
// them, and reports the context's error; a caller whose context ends returns
// at once, its item still sent.
func TestTimerCloseGivesUpWithItsContext(t *testing.T) {
	entered := make(chan struct{})
	c := coalesce.NewTimer(func(ctx context.Context, items []int) []error {
		close(entered)
		<-ctx.Done() // a request that hangs until cancelled
		return []error{ctx.Err()}
	}, 1, 0)
	dctx, dcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Do(dctx, 1) }()
	<-entered
	dcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with its context ended = %v, want context.Canceled", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v, want context.Canceled", err)
	}
}

func TestTimerPanicBecomesError(t *testing.T) {
	c := coalesce.NewTimer(func(context.Context, []int) []error { panic("boom") }, 1, 0)
	defer func() { _ = c.Close(context.Background()) }()
	if err := c.Do(context.Background(), 1); err == nil {
		t.Fatal("want an error from a panicking flush")
	}
}
