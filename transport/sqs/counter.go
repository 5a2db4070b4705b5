package sqs

import (
	"context"
	"maps"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// RequestCounter counts API requests by operation ("ReceiveMessage",
// "DeleteMessageBatch", "PublishBatch", …), every attempt included, since
// AWS bills each. Add its APIOption to ClientConfig.APIOptions; benchmarks
// and metrics divide by messages for requests per message. Safe for
// concurrent use; the zero value is ready.
type RequestCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

// APIOption installs the counter in an SDK client's middleware stack, after
// the retry middleware so that each attempt counts.
func (c *RequestCounter) APIOption(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("berthRequestCounter",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			c.add(awsmiddleware.GetOperationName(ctx))
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

func (c *RequestCounter) add(op string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[op]++
	c.mu.Unlock()
}

// Counts returns a copy of the counts by operation.
func (c *RequestCounter) Counts() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// Count returns the count of one operation.
func (c *RequestCounter) Count(op string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

// Total returns the count of all operations.
func (c *RequestCounter) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t int64
	for _, v := range c.n {
		t += v
	}
	return t
}

// Reset sets every count to zero.
func (c *RequestCounter) Reset() {
	c.mu.Lock()
	c.n = nil
	c.mu.Unlock()
}

// PublisherStats are a Publisher's counts since it was made.
type PublisherStats struct {
	// NoSubscribers counts the messages published through SNS to a topic
	// that had no subscription: SNS dropped them, or, with
	// PublisherConfig.RequireSubscribers, Publish refused them with
	// ErrNoSubscribers.
	NoSubscribers int64
}
