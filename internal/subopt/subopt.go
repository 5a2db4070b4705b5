// Package subopt carries per-Subscribe options that Berth's own tests and
// benchmarks set and users cannot: they travel in the Subscribe context, so
// they affect that one listener and nothing else (no process-wide switch).
// The receive pipeline reads them once, when it builds the listener; they
// are never read on the data path.
package subopt

import (
	"context"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/transport"
)

// Options are the per-Subscribe options.
type Options struct {
	// WrapSource decorates the listener's source (transporttest's faulty
	// source). Nil leaves it as it is.
	WrapSource func(transport.Source) transport.Source
	// WrapLogger decorates the listener's logger (transporttest's
	// panicking logger). Nil leaves it as it is.
	WrapLogger func(watermill.LoggerAdapter) watermill.LoggerAdapter
	// IgnoreBatchPending leaves batch-pending messages out of the
	// listener's QueueCount, as for a batching stage the listener cannot
	// see (membench measures what that costs).
	IgnoreBatchPending bool
}

type key struct{}

// With returns ctx carrying o.
func With(ctx context.Context, o Options) context.Context {
	return context.WithValue(ctx, key{}, o)
}

// From returns the options ctx carries (the zero value when none).
func From(ctx context.Context) Options {
	if ctx == nil {
		return Options{}
	}
	o, _ := ctx.Value(key{}).(Options)
	return o
}
