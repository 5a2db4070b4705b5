package sqs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/transport"
)

// maxBatch is SQS's limit of entries per batch request.
const maxBatch = 10

// EntryError is the failure of one entry of an SQS batch request.
// errors.Is(err, transport.ErrLeaseLost) holds for an invalid receipt
// handle or a message no longer in flight.
type EntryError struct {
	Op          string // the batch operation, e.g. "DeleteMessageBatch"
	Code        string // SQS error code, e.g. "ReceiptHandleIsInvalid"
	Message     string
	SenderFault bool // the request was wrong; retrying it cannot help
}

// Error describes the failed entry.
func (e *EntryError) Error() string {
	return fmt.Sprintf("sqs: %s entry failed: %s: %s", e.Op, e.Code, e.Message)
}

// Is matches transport.ErrLeaseLost for lost receipt handles.
func (e *EntryError) Is(target error) bool {
	return target == transport.ErrLeaseLost && (e.Code == "ReceiptHandleIsInvalid" || e.Code == "MessageNotInflight")
}

func entryError(op string, f types.BatchResultErrorEntry) *EntryError {
	return &EntryError{Op: op, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
}

// failure is one failed entry of a batch request, by position.
type failure struct {
	index int
	err   *EntryError
}

// sendFunc sends one request of at most maxBatch entries. It returns the
// failed entries (positions within es), or an error for the whole request.
type sendFunc[E any] func(ctx context.Context, es []E) ([]failure, error)

// runBatch sends entries in requests of at most maxBatch entries,
// concurrently, and sends again the entries that failed on the server side
// (not SenderFault), up to attempts times in all. It returns one error per
// entry, nil for those that succeeded.
func runBatch[E any](ctx context.Context, entries []E, attempts int, send sendFunc[E]) []error {
	errs := make([]error, len(entries))
	pending := make([]int, len(entries))
	for i := range pending {
		pending[i] = i
	}
	for attempt := 1; len(pending) > 0; attempt++ {
		var (
			mu    sync.Mutex
			wg    sync.WaitGroup
			retry []int
		)
		sendChunk := func(chunk []int) {
			es := make([]E, len(chunk))
			for i, idx := range chunk {
				es[i] = entries[idx]
			}
			failed, err := send(ctx, es)
			mu.Lock()
			defer mu.Unlock()
			for _, idx := range chunk {
				errs[idx] = err
			}
			if err != nil {
				return
			}
			for _, f := range failed {
				if f.index < 0 || f.index >= len(chunk) {
					continue
				}
				idx := chunk[f.index]
				errs[idx] = f.err
				if !f.err.SenderFault && attempt < attempts {
					retry = append(retry, idx)
				}
			}
		}
		if len(pending) <= maxBatch {
			sendChunk(pending) // one request: no goroutine
		}
		for start := 0; len(pending) > maxBatch && start < len(pending); start += maxBatch {
			chunk := pending[start:min(start+maxBatch, len(pending))]
			wg.Go(func() { sendChunk(chunk) })
		}
		wg.Wait()
		pending = retry
		if len(pending) > 0 {
			backoff := time.Duration(25<<attempt)*time.Millisecond/2 + time.Duration(rand.Int64N(int64(25*time.Millisecond)))
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return errs
			}
		}
	}
	return errs
}

// positional returns the entry ids "0".."n-1"; failures name entries by them.
func positional(i int) *string { return aws.String(strconv.Itoa(i)) }

func failures(op string, failed []types.BatchResultErrorEntry) []failure {
	fs := make([]failure, 0, len(failed))
	for _, f := range failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil {
			continue
		}
		fs = append(fs, failure{index: i, err: entryError(op, f)})
	}
	return fs
}

// deleteSender returns a sendFunc deleting receipt handles from queueURL.
func deleteSender(api API, queueURL string) sendFunc[string] {
	return func(ctx context.Context, receipts []string) ([]failure, error) {
		in := &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(queueURL), Entries: make([]types.DeleteMessageBatchRequestEntry, len(receipts))}
		for i, r := range receipts {
			in.Entries[i] = types.DeleteMessageBatchRequestEntry{Id: positional(i), ReceiptHandle: aws.String(r)}
		}
		out, err := api.DeleteMessageBatch(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("sqs: DeleteMessageBatch: %w", err)
		}
		return failures("DeleteMessageBatch", out.Failed), nil
	}
}

// visibility is one ChangeMessageVisibilityBatch entry.
type visibility struct {
	receipt string
	timeout int32 // seconds
}

// visibilitySender returns a sendFunc changing visibility in queueURL.
func visibilitySender(api API, queueURL string) sendFunc[visibility] {
	return func(ctx context.Context, vs []visibility) ([]failure, error) {
		in := &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(queueURL), Entries: make([]types.ChangeMessageVisibilityBatchRequestEntry, len(vs))}
		for i, v := range vs {
			in.Entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: positional(i), ReceiptHandle: aws.String(v.receipt), VisibilityTimeout: v.timeout}
		}
		out, err := api.ChangeMessageVisibilityBatch(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("sqs: ChangeMessageVisibilityBatch: %w", err)
		}
		return failures("ChangeMessageVisibilityBatch", out.Failed), nil
	}
}

// A batcher coalesces concurrent per-delivery settlement calls into batch
// requests (group commit): a request goes out when flushAt entries are
// waiting (maxBatch, or fewer when the pipeline's concurrency caps how many
// callers can be waiting at once), or interval after the first one arrived. Each caller gets its own
// entry's outcome. Close flushes what is waiting and waits for requests in
// flight.
type batcher[E any] struct {
	send     sendFunc[E]
	attempts int
	interval time.Duration
	flushAt  int

	ctx    context.Context // for requests; cancelled only when Close gives up
	cancel context.CancelFunc

	mu      sync.Mutex
	pending []*batchOp[E]
	timer   *time.Timer
	gen     uint64
	closed  bool
	wg      sync.WaitGroup
}

type batchOp[E any] struct {
	entry E
	done  chan error
}

func newBatcher[E any](send sendFunc[E], interval time.Duration, attempts, flushAt int) *batcher[E] {
	ctx, cancel := context.WithCancel(context.Background())
	flushAt = min(max(flushAt, 1), maxBatch)
	return &batcher[E]{send: send, interval: interval, attempts: attempts, flushAt: flushAt, ctx: ctx, cancel: cancel}
}

// do adds e to the next batch and waits for its outcome or ctx. The entry
// is sent even if ctx ends first.
func (b *batcher[E]) do(ctx context.Context, e E) error {
	op := &batchOp[E]{entry: e, done: make(chan error, 1)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return transport.ErrClosed
	}
	b.pending = append(b.pending, op)
	switch {
	case len(b.pending) >= b.flushAt || b.interval <= 0:
		b.dispatchLocked()
	case len(b.pending) == 1:
		gen := b.gen
		b.timer = time.AfterFunc(b.interval, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.gen == gen && len(b.pending) > 0 {
				b.dispatchLocked()
			}
		})
	}
	b.mu.Unlock()
	select {
	case err := <-op.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *batcher[E]) dispatchLocked() {
	batch := b.pending
	b.pending = nil
	b.gen++
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.wg.Go(func() {
		es := make([]E, len(batch))
		for i, op := range batch {
			es[i] = op.entry
		}
		errs := runBatch(b.ctx, es, b.attempts, b.send)
		for i, op := range batch {
			op.done <- errs[i]
		}
	})
}

// close flushes the waiting entries and waits for every request in flight,
// or until ctx is done, then cancels them. It is idempotent.
func (b *batcher[E]) close(ctx context.Context) error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		if len(b.pending) > 0 {
			b.dispatchLocked()
		}
	}
	b.mu.Unlock()
	done := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		b.cancel()
		return nil
	case <-ctx.Done():
		b.cancel()
		<-done
		return ctx.Err()
	}
}
