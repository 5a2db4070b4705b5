package sqlite_test

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/sqlite"
)

// A sqlite:// URL without a path is ErrInvalidConfig. (Bad parameters:
// the kit's BadURLParameterNamesItself.)
func TestURLWithoutPath(t *testing.T) {
	_, err := transport.OpenPublisher(context.Background(), "sqlite://")
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("empty path: err = %v", err)
	}
}
