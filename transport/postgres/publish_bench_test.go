package postgres_test

import (
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
)

// BenchmarkPublishOne publishes one message per call, one call at a time,
// to a topic with one subscribed queue: the latency of a publish that
// waits for its commit, most of it the server's (the statement, its
// planning, the commit's flush). keyed gives every message one of 10
// ordering keys (the key lock and the check for an earlier row of it).
func BenchmarkPublishOne(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		b.Run(fmt.Sprintf("keyed=%v", keyed), func(b *testing.B) {
			db := openDB(b, 4)
			sub, err := postgres.NewSubscriber(postgres.SubscriberConfig{DB: db}, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := sub.SubscribeInitialize("one"); err != nil {
				b.Fatal(err)
			}
			_ = sub.Close()
			pub, err := postgres.NewPublisher(postgres.PublisherConfig{DB: db}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer pub.Close()
			b.ResetTimer()
			for i := range b.N {
				m := message.NewMessage(fmt.Sprint(i), []byte("x"))
				if keyed {
					m.Metadata.Set(transport.MetadataOrderingKey, fmt.Sprint("k", i%10))
				}
				if err := pub.Publish("one", m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
