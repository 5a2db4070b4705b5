package chaos

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport/sqs"
)

// Graceful shutdown: a subscriber closed mid-load stops fetching, finishes
// or hands back in-flight work within DrainTimeout, flushes its pending
// acks, and leaves nothing leased at the broker.

const (
	shutdownMessages = 400
	shutdownDrain    = 3 * time.Second
)

func shutdownPipeline() receiver.Config {
	return receiver.Config{Concurrency: 8, DrainTimeout: shutdownDrain, CheckInterval: 50 * time.Millisecond}
}

// loadAndClose publishes, consumes until a third is handled, closes, and
// returns how many were acked. Handlers take 5–20 ms, and one message in
// 50 is held past DrainTimeout so that Close has to hand it back.
func loadAndClose(t *testing.T, b backend, topic string) int {
	t.Helper()
	ctx := context.Background()
	sub, lk, err := b.instance(ctx, "shutdown", shutdownPipeline())
	if err != nil {
		t.Fatal(err)
	}
	defer lk.close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	pub, err := b.publisher(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]*message.Message, shutdownMessages)
	for i := range msgs {
		msgs[i] = message.NewMessage(fmt.Sprintf("m%04d", i), []byte(strconv.Itoa(i)))
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	_ = pub.Close()

	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var acked, delivered atomic.Int64
	closing := make(chan struct{})
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for msg := range ch {
				n := delivered.Add(1)
				if n%50 == 0 {
					// A slow one: still running when DrainTimeout ends.
					select {
					case <-msg.Context().Done():
					case <-time.After(2 * shutdownDrain):
					}
					continue // never settled: the subscriber hands it back
				}
				select {
				case <-time.After(time.Duration(5+n%15) * time.Millisecond): // the work
				case <-closing:
				}
				if msg.Ack() {
					acked.Add(1)
				}
			}
		}()
	}
	waitFor(t, 30*time.Second, "a third of the messages handled", func() bool { return acked.Load() >= shutdownMessages/3 })

	start := time.Now()
	close(closing)
	if err := sub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	took := time.Since(start)
	for range 8 {
		<-done // the channel was closed: no worker is left reading
	}
	if took > shutdownDrain+2*time.Second {
		t.Errorf("Close took %s, want at most DrainTimeout (%s) + 2s", took, shutdownDrain)
	}
	if d := delivered.Load(); d >= shutdownMessages {
		t.Errorf("every message was delivered (%d): the subscriber did not stop fetching", d)
	}
	t.Logf("closed in %s: %d delivered, %d acked", took.Round(time.Millisecond), delivered.Load(), acked.Load())
	return int(acked.Load())
}

func TestShutdownPostgres(t *testing.T) {
	b, err := newPostgres(context.Background(), &Config{URL: testenv.PostgresURL(t), Lease: 30 * time.Second}, testenv.UniqueName("sd"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.close(context.Background())
	testShutdownSQL(t, b)
}

func TestShutdownSQLite(t *testing.T) {
	b, err := newSQLite(&Config{URL: t.TempDir(), Lease: 30 * time.Second}, "sd")
	if err != nil {
		t.Fatal(err)
	}
	testShutdownSQL(t, b)
}

func testShutdownSQL(t *testing.T, b *sqlBackend) {
	if testing.Short() {
		t.Skip("needs services")
	}
	acked := loadAndClose(t, b, b.topic)
	db, done, err := b.adminDB()
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	var total, leased int
	err = db.QueryRow(`SELECT count(*), coalesce(sum(CASE WHEN state <> 0 THEN 1 ELSE 0 END), 0) FROM `+b.q.Table).Scan(&total, &leased)
	if err != nil {
		t.Fatal(err)
	}
	if leased != 0 {
		t.Errorf("%d rows still fetched or processing after Close; want 0", leased)
	}
	if total != shutdownMessages-acked {
		t.Errorf("%d rows left, want %d − %d acked = %d: acks were not flushed (or a row was lost)", total, shutdownMessages, acked, shutdownMessages-acked)
	}
}

func TestShutdownSQS(t *testing.T) {
	if testing.Short() {
		t.Skip("needs services")
	}
	b := newSQS(&Config{URL: testenv.SQSEndpoint(t), Lease: 30 * time.Second}, testenv.UniqueName("sd"))
	b.cfg.withDefaults()
	defer b.close(context.Background())
	acked := loadAndClose(t, b, b.topic)
	u, err := b.queueURL(context.Background(), sqs.SanitizeName(b.topic, false))
	if err != nil {
		t.Fatal(err)
	}
	var visible, invisible int
	// The emulator updates its counts at once; allow a moment anyway.
	waitFor(t, 5*time.Second, "no message in flight", func() bool {
		out, err := b.api.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(u),
			AttributeNames: []sqstypes.QueueAttributeName{
				sqstypes.QueueAttributeNameApproximateNumberOfMessages,
				sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			}})
		if err != nil {
			t.Fatal(err)
		}
		visible, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
		invisible, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
		return invisible == 0
	})
	if visible != shutdownMessages-acked {
		t.Errorf("%d messages visible, want %d − %d acked = %d", visible, shutdownMessages, acked, shutdownMessages-acked)
	}
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}
