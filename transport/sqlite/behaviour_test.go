package sqlite_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/sqlite"
)

func TestBadURL(t *testing.T) {
	_, err := transport.OpenSubscriber(context.Background(), "sqlite://:memory:?lease=soon&bogus=1")
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), `"lease"`) || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("err = %v, want ErrInvalidConfig naming lease and bogus", err)
	}
	_, err = transport.OpenPublisher(context.Background(), "sqlite://")
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("empty path: err = %v", err)
	}
}
