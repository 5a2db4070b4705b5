package receiver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// losingSource is a gateSource whose leases renew, except the one of the
// delivery with ID "x", which is lost.
type losingSource struct{ *gateSource }

func (losingSource) RenewInterval() time.Duration { return time.Hour } // only the in-place check renews

func (losingSource) Renew(_ context.Context, ds []*transport.Delivery) error {
	for _, d := range ds {
		if d.ID == "x" {
			return transport.ErrLeaseLost
		}
	}
	return nil
}

// A message waiting for its in-place retry whose lease is lost meanwhile
// is dropped: user code does not see it again, and the next delivery goes
// on.
func TestInPlaceRetryDropsLostLease(t *testing.T) {
	src := losingSource{newGateSource()}
	r, out := start(t, src, receiverConfig1())
	r.Push([]*transport.Delivery{{ID: "x", Attempt: 1, Raw: "x"}, {ID: "y", Attempt: 1, Raw: "y"}})
	m := recv(t, out)
	if id := m.Metadata.Get(transport.MetadataMessageID); id != "x" {
		t.Fatalf("first delivery %s, want x", id)
	}
	m.Nack()
	m = recv(t, out)
	if id := m.Metadata.Get(transport.MetadataMessageID); id != "y" {
		t.Fatalf("after x's lease was lost, got %s (attempt %s), want y", id, m.Metadata.Get(transport.MetadataAttempt))
	}
	m.Ack()
	src.mu.Lock()
	defer src.mu.Unlock()
	if _, ok := src.retried["x"]; ok {
		t.Fatal("x, whose lease was lost, was retried through the source")
	}
}

// A message nacked with Concurrency 1 is handed to the handler again,
// attempt counted, before the next delivery; the source is not asked to
// retry it.
func TestInPlaceRetryBeforeNext(t *testing.T) {
	src := losingSource{newGateSource()}
	r, out := start(t, src, receiverConfig1())
	r.Push([]*transport.Delivery{{ID: "a", Raw: "a"}, {ID: "b", Raw: "b"}})
	var got []string
	for range 3 {
		m := recv(t, out)
		got = append(got, m.Metadata.Get(transport.MetadataMessageID)+"#"+m.Metadata.Get(transport.MetadataAttempt))
		if len(got) == 1 {
			m.Nack()
		} else {
			m.Ack()
		}
	}
	if want := "[a#1 a#2 b#1]"; fmtList(got) != want {
		t.Fatalf("deliveries %v, want %s", got, want)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if len(src.retried) != 0 {
		t.Fatalf("source retried %v; the retry was in place", src.retried)
	}
}

func receiverConfig1() receiver.Config {
	return receiver.Config{Concurrency: 1, RetryDelay: time.Millisecond}
}

func fmtList(s []string) string { return fmt.Sprint(s) }
