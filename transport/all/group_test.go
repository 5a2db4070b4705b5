package all_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// WithConsumerGroup and a URL's consumer_group naming another group are a
// conflict every driver reports as ErrInvalidConfig; the same group in
// both places, or the option alone, opens. (URLs that open without a
// server, as in TestOneURLForBothSides.)
func TestWithConsumerGroupConflict(t *testing.T) {
	ctx := context.Background()
	for _, s := range schemes(t) {
		t.Run(s.name, func(t *testing.T) {
			_, err := transport.OpenSubscriber(ctx, with(s.url, "consumer_group=audit"), transport.WithConsumerGroup("billing"))
			if !errors.Is(err, transport.ErrInvalidConfig) {
				t.Fatalf("conflicting groups: err = %v, want ErrInvalidConfig", err)
			}
			for _, u := range []string{s.url, with(s.url, "consumer_group=billing")} {
				sub, err := transport.OpenSubscriber(ctx, u, transport.WithConsumerGroup("billing"))
				if err != nil {
					t.Fatalf("OpenSubscriber(%s, WithConsumerGroup): %v", u, err)
				}
				// The SQL drivers' subscribers name their queue: it is
				// the group's (sqs: TestSubscriberConfigConsumerGroup).
				if q, ok := sub.(interface{ Queue(string) sqlqueue.Queue }); ok {
					if g := q.Queue("orders").Group; g != "billing" {
						t.Errorf("%s: queue group = %q, want billing", u, g)
					}
				}
				if err := sub.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// End to end on mem, sqlite and postgres: two subscribers opened on the
// same URL with WithConsumerGroup("billing") and ("audit") each receive
// every message (without the option they would share the default queue,
// and one of them would get nothing).
func TestWithConsumerGroupDelivers(t *testing.T) {
	cases := map[string]func(t *testing.T) string{
		"mem":    func(*testing.T) string { return "mem://" + testenv.UniqueName("group") },
		"sqlite": func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "group.db") },
		"postgres": func(t *testing.T) string {
			return with(testenv.PostgresURL(t), "table_prefix="+testenv.UniqueName("grp")+"_")
		},
	}
	for name, url := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := url(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pub, err := transport.OpenPublisher(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			const topic, n = "orders", 3
			chans := map[string]<-chan *message.Message{}
			for _, g := range []string{"billing", "audit"} {
				sub, err := transport.OpenSubscriber(ctx, u, transport.WithConsumerGroup(g))
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Close()
				ch, err := sub.Subscribe(ctx, topic)
				if err != nil {
					t.Fatal(err)
				}
				chans[g] = ch
			}
			want := map[string]bool{}
			for i := 0; i < n; i++ {
				m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
				want[m.UUID] = true
				if err := pub.Publish(topic, m); err != nil {
					t.Fatal(err)
				}
			}
			for g, ch := range chans {
				got := map[string]bool{}
				for len(got) < n {
					select {
					case m := <-ch:
						if !want[m.UUID] {
							t.Fatalf("%s: unexpected message %s", g, m.UUID)
						}
						got[m.UUID] = true
						m.Ack()
					case <-ctx.Done():
						t.Fatalf("group %s received %d of %d messages", g, len(got), n)
					}
				}
			}
		})
	}
}
