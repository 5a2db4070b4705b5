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

// publishBench opens a publisher on a fresh database file whose topic
// "bench" has a queue for each of groups ("" is the default group), and
// runs publish from workers goroutines until it has been called b.N times
// in all (each call gets its number), reporting msg/s: size messages per
// call.
func publishBench(b *testing.B, workers, size int, groups []string, publish func(pub message.Publisher, i int64) error) {
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(b.TempDir(), "p.db")
	pub, err := transport.OpenPublisher(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	for _, g := range groups {
		u := url
		if g != "" {
			u += "?consumer_group=" + g
		}
		sub, err := transport.OpenSubscriber(ctx, u)
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Close()
		if err := sub.(message.SubscribeInitializer).SubscribeInitialize("bench"); err != nil {
			b.Fatal(err)
		}
	}
	calls := (int64(b.N) + int64(size) - 1) / int64(size)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= calls; i = next.Add(1) {
				if err := publish(pub, i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(calls*int64(size))/b.Elapsed().Seconds(), "msg/s")
}

// oneMessage publishes one message a call.
func oneMessage(pub message.Publisher, _ int64) error {
	return pub.Publish("bench", message.NewMessage(watermill.NewUUID(), []byte(`{"order":1}`)))
}

// BenchmarkPublishConcurrent publishes b.N messages one per Publish call
// from 16 goroutines into a subscribed topic of a fresh database file: the
// publish path of a service whose handlers each send one message. Run:
//
//	go test ./transport/sqlite -run '^$' -bench PublishConcurrent -benchtime 20000x -count 3
func BenchmarkPublishConcurrent(b *testing.B) {
	publishBench(b, 16, 1, []string{""}, oneMessage)
}

// BenchmarkPublishBatchKeyed publishes b.N messages in batches of 100 from
// 4 goroutines, each message with one of 1,000 ordering keys drawn at
// random (so a batch may hold a key twice): an outbox forwarder's or a
// bulk import's publish path. Run:
//
//	go test ./transport/sqlite -run '^$' -bench PublishBatchKeyed -benchtime 50000x -count 3
func BenchmarkPublishBatchKeyed(b *testing.B) {
	const batch, keys = 100, 1000
	publishBench(b, 4, batch, []string{""}, func(pub message.Publisher, _ int64) error {
		msgs := make([]*message.Message, batch)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(`{"order":1}`))
			msgs[i].Metadata.Set(transport.MetadataOrderingKey, strconv.Itoa(rand.IntN(keys)))
		}
		return pub.Publish("bench", msgs...)
	})
}

// BenchmarkPublishFanOut publishes b.N messages one per Publish call from
// 16 goroutines into a topic with two consumer groups: each publish is one
// transaction of two inserts. Run:
//
//	go test ./transport/sqlite -run '^$' -bench PublishFanOut -benchtime 20000x -count 3
func BenchmarkPublishFanOut(b *testing.B) {
	publishBench(b, 16, 1, []string{"billing", "shipping"}, oneMessage)
}
