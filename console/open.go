package console

import (
	"context"
	"fmt"

	"github.com/berth-go/berth/internal/inspect"
)

// Deployment is a transport URL opened for a console: its Source and Kind
// go in a Config, and Close releases its connections after the Server's
// Close.
type Deployment struct {
	// Source reads and changes the deployment's queues.
	Source Source
	// Kind names the transport: "postgres", "sqlite", "sqlserver" or "sqs".
	Kind string

	in inspect.Inspector
}

// Open opens the deployment of a transport URL (postgres://, sqlite://,
// sqlserver://, sqs://) for a console, as berth console does. It creates
// nothing: a SQLite file or a schema that does not exist is an error.
func Open(ctx context.Context, rawURL string) (*Deployment, error) {
	in, err := inspect.Open(ctx, rawURL)
	if err != nil {
		return nil, err // already names the transport and the problem
	}
	src, ok := in.(Source)
	if !ok {
		_ = in.Close()
		return nil, fmt.Errorf("console: open: %T cannot serve a console", in)
	}
	kind := "sqs"
	if s, ok := in.(*inspect.SQL); ok {
		kind = s.Kind
	}
	return &Deployment{Source: src, Kind: kind, in: in}, nil
}

// Close closes the deployment's connections.
func (d *Deployment) Close() error { return d.in.Close() }
