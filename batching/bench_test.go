package batching_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/receiver"
)

func noop(context.Context, []*message.Message) error { return nil }

// BenchmarkConsume measures the per-message cost of Consume with tracked
// messages (pending counting on) and a BatchFunc that does nothing.
func BenchmarkConsume(b *testing.B) {
	p := receiver.NewPending(nil)
	msgs := make([]*message.Message, b.N)
	for i := range msgs {
		msgs[i] = message.NewMessage("id", nil)
		ctx, _ := receiver.NewMessageContext(context.Background(), p, nil)
		msgs[i].SetContext(ctx)
	}
	ch := make(chan *message.Message, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for _, m := range msgs {
			ch <- m
		}
		close(ch)
	}()
	if err := batching.Consume(context.Background(), ch, batching.Config{MaxSize: 100}, noop); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkHandle measures Handle called from many goroutines, as the
// router calls it.
func BenchmarkHandle(b *testing.B) {
	h, err := batching.NewHandler(batching.Config{MaxSize: 100, Concurrency: 4}, noop)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(context.Background())
	p := receiver.NewPending(nil)
	b.ReportAllocs()
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m := message.NewMessage("id", nil)
			ctx, _ := receiver.NewMessageContext(context.Background(), p, nil)
			m.SetContext(ctx)
			if err := h.Handle(m); err != nil {
				b.Error(err)
			}
		}
	})
}
