package inspect_test

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/testenv"
)

// A purge or replay of some dead letters leaves the others where a listing
// sees them at once. It used to make each unselected message visible as it
// passed, so the scan's next poll received it again and kept it hidden for
// its minute's hold: a listing right after a `berth dlq replay --filter
// id=…` missed the rest of the queue (on the emulator, all of it).
func TestSQSSettleLeavesTheOthersVisible(t *testing.T) {
	ep, err := url.Parse(testenv.SQSEndpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dlq := testenv.UniqueName("settle_dlq")
	s, err := inspect.OpenSQS(ctx, "sqs://test:test@"+ep.Host+"?region=us-east-1&dead_letter_queue="+dlq)
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(dlq)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = s.Client.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: q.QueueUrl})
	})
	const n = 15 // more than one receive
	for i := range n {
		if _, err := s.Client.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("dead " + strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var all []inspect.DeadLetter
	deadline := time.Now().Add(30 * time.Second)
	for len(all) < n {
		if all, err = s.DeadLetters(ctx, inspect.Filter{}, 0); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listing shows %d of %d dead letters", len(all), n)
		}
	}
	purged, err := s.Purge(ctx, inspect.Filter{IDs: []string{all[0].ID}}, false)
	if err != nil || len(purged) != 1 {
		t.Fatalf("purge of one: %d purged, %v", len(purged), err)
	}
	left, err := s.DeadLetters(ctx, inspect.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != n-1 {
		t.Fatalf("after purging one of %d, a listing shows %d, want %d", n, len(left), n-1)
	}
}
