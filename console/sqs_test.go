package console_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
)

// The console's queue and dead-letter pages on SQS, against the emulator
// (the inspector lists queues under the topic's prefix, so the dead-letter
// queue, outside it, is counted on its own):
// a message nacked past max_attempts=1 is copied to the dead-letter queue
// by the subscriber; the queue list shows the queue with its dead-letter
// queue, the dead-letter API finds the message with its reason, and its
// detail and the HTML pages answer. SQS counts are approximate and a
// listing receives messages (made visible again), so each check waits for
// its condition.
func TestSQSPages(t *testing.T) {
	c := testenv.SQSConfig(t)
	e, err := url.Parse(c.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	topic := testenv.UniqueName("console_orders")
	dlq := testenv.UniqueName("console_dlq")
	sqsURL := "sqs://" + c.AccessKeyID + ":" + c.SecretAccessKey + "@" + e.Host + "?region=" + c.Region +
		"&create=true&dead_letter_queue=" + dlq + "&max_receive_count=1&max_attempts=1&wait_time=1s&visibility_timeout=1s"
	ctx := context.Background()
	pub, err := transport.OpenPublisher(ctx, sqsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	sub, err := transport.OpenSubscriber(ctx, sqsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	subCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	ch, err := sub.Subscribe(subCtx, topic)
	if err != nil {
		t.Fatal(err)
	}
	poison := message.NewMessage("poison-1", []byte(`{"order":1}`))
	if err := pub.Publish(topic, poison, message.NewMessage("fine-1", []byte("ok"))); err != nil {
		t.Fatal(err)
	}
	// The subscriber dead-letters the poison by leaving it to the queue's
	// redrive policy (max_receive_count=1): the next receive moves it to
	// the dead-letter queue. Keep consuming until the test ends.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ch {
			if m.UUID == poison.UUID {
				m.Nack()
			} else {
				m.Ack()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	src, err := inspect.OpenSQS(ctx, sqsURL)
	if err != nil {
		t.Fatal(err)
	}
	src.Prefix = topic
	srv, err := console.New(console.Config{Source: src, Kind: "sqs"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
	})
	server := httptest.NewServer(srv.Handler())
	t.Cleanup(server.Close)
	hs := server.URL

	waitCond(t, "the queue with its dead-letter queue in /api/queues", func() bool {
		code, body := do(t, "GET", hs+"/api/queues", "")
		var qs struct {
			Queues []struct {
				Name            string `json:"name"`
				DeadLetterQueue string `json:"dead_letter_queue"`
				DeadLettered    int64  `json:"dead_lettered"`
			}
		}
		if code != 200 || json.Unmarshal([]byte(body), &qs) != nil {
			t.Fatalf("/api/queues: %d %s", code, body)
		}
		for _, q := range qs.Queues {
			if q.Name == topic && q.DeadLetterQueue == dlq && q.DeadLettered >= 1 {
				return true
			}
		}
		return false
	})
	var id string
	waitCond(t, "the poison in /api/deadletters", func() bool {
		code, body := do(t, "GET", hs+"/api/deadletters?queue="+url.QueryEscape(topic), "")
		var page struct {
			DeadLetters []struct{ ID, UUID, Reason string } `json:"dead_letters"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &page) != nil {
			t.Fatalf("/api/deadletters: %d %s", code, body)
		}
		for _, d := range page.DeadLetters {
			if d.UUID == poison.UUID {
				if d.Reason == "" {
					t.Fatalf("dead letter without a reason: %s", body)
				}
				id = d.ID
				return true
			}
		}
		return false
	})
	waitCond(t, "the poison's detail", func() bool {
		code, body := do(t, "GET", hs+"/api/deadletters/"+url.PathEscape(id), "")
		return code == 200 && strings.Contains(body, poison.UUID)
	})
	if code, body := do(t, "GET", hs+"/queues", ""); code != 200 || !strings.Contains(body, topic) {
		t.Fatalf("/queues: %d", code)
	}
	if code, _ := do(t, "GET", hs+"/deadletters?queue="+url.QueryEscape(topic), ""); code != 200 {
		t.Fatalf("/deadletters: %d", code)
	}
	if code, body := do(t, "GET", hs+"/api/deadletters?cursor=x", ""); code != 400 {
		t.Fatalf("a cursor on SQS: %d %s, want 400", code, body)
	}
}
