package coalesce_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/coalesce"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIdleFlushesAtOnce(t *testing.T) {
	var calls atomic.Int32
	c := coalesce.New(func(_ context.Context, items []int) []error {
		calls.Add(1)
		if len(items) != 1 || items[0] != 7 {
			t.Errorf("items = %v, want [7]", items)
		}
		return nil
	}, 10)
	if err := c.Do(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Fatalf("flushes = %d, want 1", calls.Load())
	}
}

// While one flush is in flight, later callers queue and go out together.
func TestGroupsWhileInFlight(t *testing.T) {
	f := newFirstBlocks()
	c, entered, release := coalesce.New(f.flush, 3), f.entered, f.release

	var wg sync.WaitGroup
	results := make([]error, 8)
	wg.Add(1)
	go func() { defer wg.Done(); results[0] = c.Do(context.Background(), 0) }()
	<-entered
	var queued sync.WaitGroup
	for i := 1; i < 8; i++ {
		wg.Add(1)
		queued.Add(1)
		go func() {
			defer wg.Done()
			queued.Done()
			results[i] = c.Do(context.Background(), i)
		}()
	}
	queued.Wait()
	// Wait until all seven are queued behind the in-flight flush.
	waitQueued(t, c, 7)
	close(release)
	wg.Wait()

	for i, err := range results {
		if (i%2 == 1) != (err != nil) {
			t.Errorf("item %d: err = %v", i, err)
		}
	}
	batches := f.batches
	if len(batches) != 4 { // [0], then 7 queued in batches of at most 3
		t.Fatalf("batches = %v, want 4 flushes", batches)
	}
	seen := map[int]bool{}
	for _, b := range batches {
		if len(b) > 3 {
			t.Errorf("batch %v exceeds max 3", b)
		}
		for _, it := range b {
			if seen[it] {
				t.Errorf("item %d flushed twice", it)
			}
			seen[it] = true
		}
	}
	if len(seen) != 8 {
		t.Errorf("flushed %d distinct items, want 8", len(seen))
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(context.Background(), 1); !errors.Is(err, coalesce.ErrClosed) {
		t.Fatalf("Do after Close = %v, want ErrClosed", err)
	}
}

func TestCancelledWhileQueuedWithdraws(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var flushed atomic.Int32
	c := coalesce.New(func(_ context.Context, items []int) []error {
		flushed.Add(int32(len(items)))
		if items[0] == 0 {
			close(entered)
			<-release
		}
		return nil
	}, 10)
	done := make(chan error, 1)
	go func() { done <- c.Do(context.Background(), 0) }()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Do(ctx, 1) }()
	waitQueued(t, c, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Do = %v, want context.Canceled", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if flushed.Load() != 1 {
		t.Fatalf("flushed %d items, want 1 (the withdrawn one must not flush)", flushed.Load())
	}
}

func TestFlushSeesNoCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := coalesce.New(func(ctx context.Context, items []int) []error {
		return []error{ctx.Err()}
	}, 1)
	// An already-cancelled caller on an idle coalescer still leads its own
	// flush, whose context is not cancelled.
	if err := c.Do(ctx, 1); err != nil {
		t.Fatalf("Do = %v, want nil", err)
	}
}

func TestPanicBecomesError(t *testing.T) {
	c := coalesce.New(func(context.Context, []int) []error { panic("boom") }, 1)
	if err := c.Do(context.Background(), 1); err == nil {
		t.Fatal("want an error from a panicking flush")
	}
	if err := c.Do(context.Background(), 2); err == nil {
		t.Fatal("coalescer must stay usable after a panic")
	}
}

func waitQueued[T any](t *testing.T, c *coalesce.Coalescer[T], n int) {
	t.Helper()
	for i := 0; ; i++ {
		if c.Queued() >= n {
			return
		}
		if i > 1e7 {
			t.Fatalf("never saw %d queued", n)
		}
		runtime.Gosched()
	}
}

// With a linger, items that arrive within it after an idle period share the
// first flush instead of the first one going alone.
func TestLingerGathersTheFirstBatch(t *testing.T) {
	var mu sync.Mutex
	var batches []int
	c := coalesce.NewLingerLull(func(_ context.Context, items []int) []error {
		mu.Lock()
		batches = append(batches, len(items))
		mu.Unlock()
		return nil
	}, 4, time.Minute, 0) // no lull: ends only when the batch fills
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Do(context.Background(), i); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 1 || batches[0] != 4 {
		t.Fatalf("batches %v, want one batch of 4", batches)
	}
}

// A lingering flush that no other item joins goes at the lull, not at the
// end of the linger: callers that come back only after their own flush
// would otherwise wait the whole linger every time.
func TestLingerEndsAtALull(t *testing.T) {
	flushed := make(chan []int, 1)
	c := coalesce.NewLingerLull(func(_ context.Context, items []int) []error {
		flushed <- items
		return nil
	}, 100, time.Hour, 10*time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- c.Do(context.Background(), 7) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // far past the lull, far short of the linger
		t.Fatal("a lone item waited past its lull")
	}
	if got := <-flushed; len(got) != 1 || got[0] != 7 {
		t.Fatalf("flushed %v, want [7]", got)
	}
}

// Every Do gets its own item's outcome while waiters are recycled between
// calls, withdrawn ones (a context cancelled while queued) included.
func TestOutcomesStayWithTheirItems(t *testing.T) {
	errOdd := errors.New("odd")
	c := coalesce.New(func(_ context.Context, items []int) []error {
		errs := make([]error, len(items))
		for i, it := range items {
			if it%2 == 1 {
				errs[i] = errOdd
			}
		}
		return errs
	}, 4)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				item := g*1000 + i
				ctx := context.Background()
				if i%5 == 0 {
					ctx = cancelled // withdrawn if queued, else seen through
				}
				err := c.Do(ctx, item)
				switch {
				case ctx == cancelled && errors.Is(err, context.Canceled):
				case item%2 == 1 && !errors.Is(err, errOdd), item%2 == 0 && err != nil:
					t.Errorf("Do(%d) = %v", item, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// DoAsync on an idle coalescer flushes on the caller's goroutine before it
// returns; while a flush is in flight, asynchronous items queue, their
// callers return at once, and the leader flushes them next, each callback
// getting its own item's outcome, exactly once.
func TestDoAsyncQueuesAndTheLeaderFlushes(t *testing.T) {
	f := newFirstBlocks()
	c, entered, release := coalesce.New(f.flush, 10), f.entered, f.release
	outcomes := make(chan [2]any, 10)
	done := func(it int) func(error) {
		return func(err error) { outcomes <- [2]any{it, err} }
	}
	leaderDone := make(chan struct{})
	go func() {
		defer close(leaderDone)
		c.DoAsync(context.Background(), 0, done(0)) // idle: leads, blocks in the first flush
	}()
	<-entered
	for i := 1; i <= 4; i++ {
		c.DoAsync(context.Background(), i, done(i)) // returns at once: a flush is in flight
	}
	select {
	case <-leaderDone:
		t.Fatal("the leader returned while its flush was blocked")
	default:
	}
	close(release)
	<-leaderDone // it led the queued items' flush too
	got := map[int]error{}
	for range 5 {
		o := <-outcomes
		it := o[0].(int)
		if _, dup := got[it]; dup {
			t.Fatalf("item %d called back twice", it)
		}
		err, _ := o[1].(error)
		got[it] = err
	}
	for it, err := range got {
		if (it%2 == 1) != (err != nil) {
			t.Errorf("item %d: err = %v", it, err)
		}
	}
	f.mu.Lock()
	batches := f.batches
	f.mu.Unlock()
	if len(batches) != 2 || len(batches[1]) != 4 {
		t.Fatalf("batches = %v, want [[0] [1 2 3 4]]", batches)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	called := make(chan error, 1)
	c.DoAsync(context.Background(), 9, func(err error) { called <- err })
	if err := <-called; !errors.Is(err, coalesce.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

// A Do caller queued behind asynchronous items is handed the lead when its
// item heads the queue; asynchronous items behind it are flushed by it.
// A panicking callback is ignored.
func TestDoAsyncMixedWithDo(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var flushes atomic.Int32
	c := coalesce.New(func(_ context.Context, items []int) []error {
		if flushes.Add(1) == 1 {
			close(entered)
			<-release
		}
		return nil
	}, 1) // one item per flush: the queue's order decides who leads
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.DoAsync(context.Background(), 0, func(error) { panic("callback") })
	}()
	<-entered
	var asyncDone sync.WaitGroup
	asyncDone.Add(2)
	c.DoAsync(context.Background(), 1, func(error) { asyncDone.Done() })
	syncErr := make(chan error, 1)
	go func() { syncErr <- c.Do(context.Background(), 2) }()
	waitQueued(t, c, 2)
	c.DoAsync(context.Background(), 3, func(error) { asyncDone.Done() })
	close(release)
	if err := <-syncErr; err != nil {
		t.Fatal(err)
	}
	asyncDone.Wait()
	wg.Wait()
	if n := flushes.Load(); n != 4 {
		t.Fatalf("flushes = %d, want 4", n)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// firstBlocks is a flush that records every batch, fails odd items, and
// blocks its first call until release is closed (entered is closed when
// it starts).
type firstBlocks struct {
	entered, release chan struct{}
	mu               sync.Mutex
	batches          [][]int
}

func newFirstBlocks() *firstBlocks {
	return &firstBlocks{entered: make(chan struct{}), release: make(chan struct{})}
}

func (f *firstBlocks) flush(_ context.Context, items []int) []error {
	f.mu.Lock()
	f.batches = append(f.batches, append([]int(nil), items...))
	first := len(f.batches) == 1
	f.mu.Unlock()
	if first {
		close(f.entered)
		<-f.release
	}
	errs := make([]error, len(items))
	for i, it := range items {
		if it%2 == 1 {
			errs[i] = fmt.Errorf("odd %d", it)
		}
	}
	return errs
}
