package wait

import (
	"context"
	"errors"
	"sync"
	"testing"
)

func TestGroup(t *testing.T) {
	var wg sync.WaitGroup
	if err := Group(context.Background(), &wg); err != nil {
		t.Fatalf("empty group: %v", err)
	}
	wg.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Group(ctx, &wg); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled with a busy group: %v", err)
	}
	wg.Done()
	if err := Group(context.Background(), &wg); err != nil {
		t.Fatalf("finished group: %v", err)
	}
}
