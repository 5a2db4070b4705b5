package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all"
)

// A message a router's handler fails three times reaches the dead letters
// with each earlier attempt's error, and one waiting for its retry shows
// its failed attempt: the API's attempt_errors and the detail pages, from
// a real subscriber's nacks.
func TestAttemptErrorsShown(t *testing.T) { sqlURLs(t, testAttemptErrorsShown) }

func testAttemptErrorsShown(t *testing.T, rawURL string) {
	ctx := context.Background()
	pub, err := transport.OpenPublisher(ctx, rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(receiver.DeadLetterReason())
	fail := func(msg *message.Message) error {
		return fmt.Errorf("card declined on try %s", msg.Metadata.Get(transport.MetadataAttempt))
	}
	for _, c := range []struct{ topic, params string }{
		{"charges", "max_attempts=3&retry_delay=1ms"}, // dead-lettered on attempt 3
		{"refunds", "max_attempts=3&retry_delay=1h"},  // waits an hour after attempt 1
	} {
		sub, err := transport.OpenSubscriber(ctx, withQuery(t, rawURL, c.params))
		if err != nil {
			t.Fatal(err)
		}
		router.AddConsumerHandler(c.topic, c.topic, sub, fail)
	}
	go func() { _ = router.Run(ctx) }()
	t.Cleanup(func() { _ = router.Close() })
	<-router.Running()
	for _, topic := range []string{"charges", "refunds"} {
		if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(topic))); err != nil {
			t.Fatal(err)
		}
	}

	src := open(t, rawURL)
	srv, err := console.New(console.Config{Source: src, Kind: src.Kind})
	if err != nil {
		t.Fatal(err)
	}
	hs := serve(t, srv, srv.Handler()).URL

	type attempt struct {
		Attempt int
		At      time.Time
		Reason  string
	}
	var dead struct {
		DeadLetters []struct{ ID, Reason string } `json:"dead_letters"`
	}
	waitCond(t, "the dead letter", func() bool {
		code, body := do(t, "GET", hs+"/api/deadletters", "")
		return code == 200 && json.Unmarshal([]byte(body), &dead) == nil && len(dead.DeadLetters) == 1
	})
	if want := "nacked on attempt 3 of 3 (MaxAttempts): card declined on try 3"; dead.DeadLetters[0].Reason != want {
		t.Fatalf("reason %q, want %q", dead.DeadLetters[0].Reason, want)
	}
	code, body := do(t, "GET", hs+"/api/deadletters/"+dead.DeadLetters[0].ID, "")
	var detail struct {
		Attempts []attempt `json:"attempt_errors"`
	}
	if err := json.Unmarshal([]byte(body), &detail); code != 200 || err != nil {
		t.Fatalf("detail: %d %v %s", code, err, body)
	}
	if len(detail.Attempts) != 2 || detail.Attempts[0].Attempt != 1 || detail.Attempts[0].Reason != "card declined on try 1" ||
		detail.Attempts[1].Attempt != 2 || detail.Attempts[1].Reason != "card declined on try 2" ||
		time.Since(detail.Attempts[0].At) > time.Minute || detail.Attempts[1].At.Before(detail.Attempts[0].At) {
		t.Fatalf("dead letter's earlier attempts = %+v", detail.Attempts)
	}
	code, body = do(t, "GET", hs+"/deadletters/"+dead.DeadLetters[0].ID, "")
	if code != 200 || !strings.Contains(body, `id="attempt-errors"`) || !strings.Contains(body, "card declined on try 2") {
		t.Fatalf("detail page: %d\n%s", code, body)
	}

	// The refund waits for its retry with its first attempt's error.
	var msgs struct {
		Messages []struct{ ID, Queue string } `json:"messages"`
	}
	var queue string
	waitCond(t, "the refund's failed attempt", func() bool {
		code, body := do(t, "GET", hs+"/api/queues", "")
		var qs struct {
			Queues []struct{ Name, Topic string }
		}
		if code != 200 || json.Unmarshal([]byte(body), &qs) != nil {
			return false
		}
		for _, q := range qs.Queues {
			if q.Topic == "refunds" {
				queue = q.Name
			}
		}
		if queue == "" {
			return false
		}
		code, body = do(t, "GET", hs+"/api/queues/"+queue+"/messages?state=delayed", "")
		if code != 200 || json.Unmarshal([]byte(body), &msgs) != nil || len(msgs.Messages) != 1 {
			return false
		}
		code, body = do(t, "GET", hs+"/api/queues/"+queue+"/messages/"+msgs.Messages[0].ID, "")
		detail.Attempts = nil
		return code == 200 && json.Unmarshal([]byte(body), &detail) == nil && len(detail.Attempts) == 1
	})
	if a := detail.Attempts[0]; a.Attempt != 1 || a.Reason != "card declined on try 1" {
		t.Fatalf("the refund's failed attempts = %+v", detail.Attempts)
	}
	code, body = do(t, "GET", hs+"/queues/"+queue+"/messages/"+msgs.Messages[0].ID, "")
	if code != 200 || !strings.Contains(body, `id="attempt-errors"`) || !strings.Contains(body, "card declined on try 1") {
		t.Fatalf("message page: %d\n%s", code, body)
	}
}

// withQuery returns rawURL with params (a query string) added.
func withQuery(t *testing.T, rawURL, params string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	extra, err := url.ParseQuery(params)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range extra {
		q[k] = vs
	}
	u.RawQuery = q.Encode()
	return u.String()
}
