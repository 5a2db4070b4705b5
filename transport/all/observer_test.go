package all_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// recorder is a transport.Observer that records what it saw, by listener.
type recorder struct {
	transport.NopObserver
	mu        sync.Mutex
	waves     map[string]int
	delivered map[string][]string // listener → message UUIDs
	settled   map[string][]transport.Outcome
	dead      map[string][]string // listener → reasons
}

func newRecorder() *recorder {
	return &recorder{
		waves:     map[string]int{},
		delivered: map[string][]string{},
		settled:   map[string][]transport.Outcome{},
		dead:      map[string][]string{},
	}
}

func (r *recorder) WaveDone(listener string, _, _, _ int, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waves[listener]++
}

func (r *recorder) Delivering(ctx context.Context, listener string, msg *message.Message) (context.Context, func(transport.Outcome)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delivered[listener] = append(r.delivered[listener], msg.UUID)
	return ctx, func(o transport.Outcome) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.settled[listener] = append(r.settled[listener], o)
	}
}

func (r *recorder) DeadLettered(listener string, _ *message.Message, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead[listener] = append(r.dead[listener], reason)
}

// saw returns a copy of what was recorded for listener.
func (r *recorder) saw(listener string) (waves int, delivered []string, settled []transport.Outcome, dead []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waves[listener], append([]string(nil), r.delivered[listener]...),
		append([]transport.Outcome(nil), r.settled[listener]...), append([]string(nil), r.dead[listener]...)
}

// receiveAck waits for one message on msgs, acks it and returns it.
func receiveAck(t *testing.T, msgs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatal("subscription closed")
		}
		m.Ack()
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30s")
		return nil
	}
}

// TestOpenWithObserver: transport.WithObserver reaches the pipeline of a
// subscriber opened by URL: waves, the delivery and its outcome are
// observed under the listener's name.
func TestOpenWithObserver(t *testing.T) {
	for _, u := range []string{
		"mem://observed?empty_delay=10ms",
		"sqlite://" + filepath.Join(t.TempDir(), "observed.db") + "?empty_delay=10ms",
	} {
		scheme, _, _ := strings.Cut(u, ":")
		t.Run(scheme, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rec := newRecorder()
			sub, err := transport.OpenSubscriber(ctx, u, transport.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			// A publisher ignores the option (it has no pipeline).
			pub, err := transport.OpenPublisher(ctx, u, transport.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()

			topic := "observed_" + watermill.NewShortUUID()
			msgs, err := sub.Subscribe(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			msg := message.NewMessage(watermill.NewUUID(), []byte("observed"))
			if err := pub.Publish(topic, msg); err != nil {
				t.Fatal(err)
			}
			if got := receiveAck(t, msgs); got.UUID != msg.UUID {
				t.Fatalf("received %s, want %s", got.UUID, msg.UUID)
			}
			eventually(t, "the ack observed", func() bool {
				_, _, settled, _ := rec.saw(topic)
				return len(settled) == 1
			})
			waves, delivered, settled, dead := rec.saw(topic)
			if waves == 0 || len(delivered) != 1 || delivered[0] != msg.UUID || settled[0] != transport.OutcomeAcked || len(dead) != 0 {
				t.Fatalf("observed waves %d, delivered %v, settled %v, dead %v; want waves, %s delivered and acked",
					waves, delivered, settled, dead, msg.UUID)
			}
		})
	}
}
