package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/backoff"
	"github.com/berth-go/berth/internal/coalesce"
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

// retryBackoff spaces the attempts of batch entries that failed on the
// server side: 25–50 ms before the second, 50–100 ms before the third, at
// most 1 s.
var retryBackoff = backoff.Policy{Base: 50 * time.Millisecond, Max: time.Second}

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
			t := time.NewTimer(retryBackoff.Delay(attempt - 1))
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

// newBatcher returns the coalescer of one settlement request type: entries
// of concurrent per-delivery calls share a batch request (group commit),
// which goes when flushAt entries wait (at most maxBatch: fewer when the
// pipeline's concurrency caps how many callers can be waiting at once) or
// interval after the first one arrived. Each caller gets its own entry's
// outcome; entries that failed on the server side are sent again, up to
// attempts in all. Close flushes what waits and waits for the requests in
// flight. Do returns coalesce.ErrClosed after Close: callers map it to
// transport.ErrClosed (settleErr).
func newBatcher[E any](send sendFunc[E], interval time.Duration, attempts, flushAt int) *coalesce.Coalescer[E] {
	return coalesce.NewTimer(func(ctx context.Context, es []E) []error {
		return runBatch(ctx, es, attempts, send)
	}, min(max(flushAt, 1), maxBatch), interval)
}

// settleErr maps the coalescer's ErrClosed to transport.ErrClosed.
func settleErr(err error) error {
	if errors.Is(err, coalesce.ErrClosed) {
		return transport.ErrClosed
	}
	return err
}
