package inspect

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-go/berth/transport"
)

// TestOpenSQSAcceptsTheTransportsCodec checks that an sqs:// URL the
// transport accepts with its codec parameter is accepted here too, and a
// bad codec is named.
func TestOpenSQSAcceptsTheTransportsCodec(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no request is made: only the parameters are checked first
	_, err := OpenSQS(ctx, "sqs://127.0.0.1:1?codec=watermill-aws&request_attempts=1")
	if errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("codec=watermill-aws: %v", err)
	}
	_, err = OpenSQS(ctx, "sqs://127.0.0.1:1?codec=bogus")
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("codec=bogus: %v, want ErrInvalidConfig", err)
	}
}
