package batching

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

var (
	// ErrDiscarded is the outcome of a member removed from its batch before
	// the batch was handled, because the member's message context was done.
	// It is joined with the context's cause, so errors.Is also matches
	// context.Canceled or context.DeadlineExceeded.
	ErrDiscarded = errors.New("batching: member discarded")

	// ErrMemberFailed is the outcome of a member named by a PartialError
	// without an error of its own.
	ErrMemberFailed = errors.New("batching: member failed")
)

// PartialError is returned by a BatchFunc to fail some members of a batch
// and succeed the others. Return it as a pointer (possibly wrapped); it is
// matched with errors.As. Members not named in Failed are acked.
//
// A PartialError naming an index outside the batch fails the whole batch.
type PartialError struct {
	// Failed maps the index of each failed member, in the slice given to
	// the BatchFunc, to its error. A nil error stands for ErrMemberFailed.
	Failed map[int]error
}

// Fail returns a PartialError failing the members at indexes with err
// (nil for ErrMemberFailed).
func Fail(err error, indexes ...int) *PartialError {
	pe := &PartialError{Failed: make(map[int]error, len(indexes))}
	for _, i := range indexes {
		pe.Failed[i] = err
	}
	return pe
}

// Error lists the failed members (the first five) and their errors.
func (e *PartialError) Error() string {
	idx := make([]int, 0, len(e.Failed))
	for i := range e.Failed {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	var b strings.Builder
	fmt.Fprintf(&b, "batching: %d members failed:", len(idx))
	for n, i := range idx {
		if n == 5 {
			fmt.Fprintf(&b, " …")
			break
		}
		err := e.Failed[i]
		if err == nil {
			err = ErrMemberFailed
		}
		fmt.Fprintf(&b, " [%d] %v;", i, err)
	}
	return strings.TrimSuffix(b.String(), ";")
}
