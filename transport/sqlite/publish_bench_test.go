package sqlite_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// BenchmarkPublishConcurrent publishes b.N messages one per Publish call
// from 16 goroutines into a subscribed topic of a fresh database file: the
// publish path of a service whose handlers each send one message. Run:
//
//	go test ./transport/sqlite -run '^$' -bench PublishConcurrent -benchtime 20000x -count 3
func BenchmarkPublishConcurrent(b *testing.B) {
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(b.TempDir(), "p.db")
	pub, err := transport.OpenPublisher(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	sub, err := transport.OpenSubscriber(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	if err := sub.(message.SubscribeInitializer).SubscribeInitialize("bench"); err != nil {
		b.Fatal(err)
	}
	const workers = 16
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := pub.Publish("bench", message.NewMessage(watermill.NewUUID(), []byte(`{"order":1}`))); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
}

// BenchmarkPublishBatchKeyed publishes b.N messages in batches of 100 from
// 4 goroutines, each message with one of 1,000 ordering keys drawn at
// random (so a batch may hold a key twice): an outbox forwarder's or a
// bulk import's publish path. Run:
//
//	go test ./transport/sqlite -run '^$' -bench PublishBatchKeyed -benchtime 50000x -count 3
func BenchmarkPublishBatchKeyed(b *testing.B) {
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(b.TempDir(), "p.db")
	pub, err := transport.OpenPublisher(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	sub, err := transport.OpenSubscriber(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	if err := sub.(message.SubscribeInitializer).SubscribeInitialize("bench"); err != nil {
		b.Fatal(err)
	}
	const workers, batch, keys = 4, 100, 1000
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				end := next.Add(batch)
				if end-batch >= int64(b.N) {
					return
				}
				msgs := make([]*message.Message, 0, batch)
				for i := end - batch; i < min(end, int64(b.N)); i++ {
					m := message.NewMessage(watermill.NewUUID(), []byte(`{"order":1}`))
					m.Metadata.Set(transport.MetadataOrderingKey, strconv.Itoa(rand.IntN(keys)))
					msgs = append(msgs, m)
				}
				if err := pub.Publish("bench", msgs...); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
}

// BenchmarkPublishFanOut publishes b.N messages one per Publish call from
// 16 goroutines into a topic with two consumer groups: each publish is one
// transaction of two inserts. Run:
//
//	go test ./transport/sqlite -run '^$' -bench PublishFanOut -benchtime 20000x -count 3
func BenchmarkPublishFanOut(b *testing.B) {
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(b.TempDir(), "p.db")
	pub, err := transport.OpenPublisher(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	for _, g := range []string{"billing", "shipping"} {
		sub, err := transport.OpenSubscriber(ctx, url+"?consumer_group="+g)
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Close()
		if err := sub.(message.SubscribeInitializer).SubscribeInitialize("bench"); err != nil {
			b.Fatal(err)
		}
	}
	const workers = 16
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := pub.Publish("bench", message.NewMessage(watermill.NewUUID(), []byte(`{"order":1}`))); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
}
