package all_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/mem"
)

// deadLetterParams make a poison message dead-letter on its second attempt.
const deadLetterParams = "max_attempts=2&retry_delay=10ms&empty_delay=20ms"

// TestDeadLetterReasonThroughRouter: a poison message through a Watermill
// router with receiver.DeadLetterReason ends in the dead letters with the
// handler's error after the attempt count, in what the destination stores
// (mem's DeadLetter, the SQL error row, SQS's berth_dead_letter attribute,
// as `berth dlq` reads them) and in what the observer is told.
func TestDeadLetterReasonThroughRouter(t *testing.T) {
	for _, c := range []struct {
		scheme string
		url    func(t *testing.T) string
		// reasons reads the stored reasons of topic's dead letters.
		reasons func(t *testing.T, url, topic string) []string
	}{
		{
			scheme:  "mem",
			url:     func(*testing.T) string { return "mem://dead-letter-reason?" + deadLetterParams },
			reasons: memReasons("dead-letter-reason"),
		},
		{
			scheme: "sqlite",
			url: func(t *testing.T) string {
				return "sqlite://" + filepath.Join(t.TempDir(), "dead.db") + "?" + deadLetterParams
			},
			reasons: inspectedReasons,
		},
		{
			scheme:  "postgres",
			url:     func(t *testing.T) string { return testenv.PostgresSchemaURL(t) + "&" + deadLetterParams },
			reasons: inspectedReasons,
		},
		{
			scheme: "sqs",
			url: func(t *testing.T) string {
				c := testenv.SQSConfig(t)
				e, err := url.Parse(c.Endpoint)
				if err != nil {
					t.Fatal(err)
				}
				return "sqs://" + c.AccessKeyID + ":" + c.SecretAccessKey + "@" + e.Host + "?region=" + c.Region +
					"&create=true&wait_time=1s&dead_letter_queue=" + testenv.UniqueName("dlq") + "&" + deadLetterParams
			},
			reasons: inspectedReasons,
		},
	} {
		t.Run(c.scheme, func(t *testing.T) {
			u := c.url(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rec := newRecorder()
			pub, err := transport.OpenPublisher(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			sub, err := transport.OpenSubscriber(ctx, u, transport.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()

			topic := testenv.UniqueName("poison")
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			if err != nil {
				t.Fatal(err)
			}
			router.AddMiddleware(receiver.DeadLetterReason())
			router.AddConsumerHandler("orders", topic, sub, func(m *message.Message) error {
				return fmt.Errorf("order %s: card declined", m.UUID)
			})
			ran := make(chan error, 1)
			go func() { ran <- router.Run(ctx) }()
			defer func() {
				_ = router.Close()
				if err := <-ran; err != nil {
					t.Errorf("router: %v", err)
				}
			}()
			<-router.Running()

			poison := message.NewMessage(watermill.NewUUID(), []byte(`{"total":99}`))
			if err := pub.Publish(topic, poison); err != nil {
				t.Fatal(err)
			}
			want := "nacked on attempt 2 of 2 (MaxAttempts): order " + poison.UUID + ": card declined"
			var observed []string
			eventually(t, "the dead letter observed", func() bool {
				for _, l := range sub.ListenerStates() {
					if _, _, _, dead := rec.saw(l.Name); len(dead) > 0 {
						observed = dead
						return true
					}
				}
				return false
			})
			if len(observed) != 1 || observed[0] != want {
				t.Errorf("observer got reasons %q, want [%q]", observed, want)
			}
			if got := c.reasons(t, u, topic); len(got) != 1 || got[0] != want {
				t.Errorf("stored reasons %q, want [%q]", got, want)
			}
		})
	}
}

// memReasons reads the dead letters of the mem broker called broker.
func memReasons(broker string) func(t *testing.T, _, topic string) []string {
	return func(_ *testing.T, _, topic string) []string {
		var out []string
		for _, dl := range mem.Named(broker).DeadLetters(topic, "") {
			out = append(out, dl.Reason)
		}
		return out
	}
}

// inspectedReasons reads the dead letters of topic as `berth dlq list`
// does.
func inspectedReasons(t *testing.T, u, topic string) []string {
	t.Helper()
	ctx := context.Background()
	in, err := inspect.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dls, err := in.DeadLetters(ctx, inspect.Filter{Queue: topic}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, dl := range dls {
		out = append(out, dl.Reason)
	}
	return out
}
