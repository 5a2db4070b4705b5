package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
)

// A queue table dropped under a running subscriber is reported distinctly
// (QueueMissing) and re-created; the loop keeps running and later messages
// are delivered.
func TestDroppedQueueIsReportedAndRecreated(t *testing.T) {
	db := openDB(t, 4)
	c := testPipeline()
	c.DB = db
	c.Pipeline.EmptyDelay = 20 * time.Millisecond
	c.Pipeline.ErrorBackoff = 10 * time.Millisecond
	missing := make(chan error, 1)
	c.Pipeline.Observer = waveErrs{ch: missing}
	sub, err := postgres.NewSubscriber(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), "dropped")
	if err != nil {
		t.Fatal(err)
	}
	q := sub.Queue("dropped")
	if _, err := db.Exec("DROP TABLE " + q.Table); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-missing:
		if !errors.Is(err, transport.ErrQueueNotFound) {
			t.Fatalf("wave error %v, want ErrQueueNotFound", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the missing table was never reported; states %+v", sub.ListenerStates())
	}
	waitFor(t, 20*time.Second, func() bool {
		var n int
		return db.QueryRow("SELECT count(*) FROM "+q.Table).Scan(&n) == nil
	})
	pub := newPub(t, db)
	if err := pub.Publish("dropped", message.NewMessage("after-drop", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		if m.UUID != "after-drop" {
			t.Fatalf("got %s", m.UUID)
		}
		m.Ack()
	case <-time.After(20 * time.Second):
		t.Fatalf("no message after re-creation; states %+v", sub.ListenerStates())
	}
	waitFor(t, 10*time.Second, func() bool {
		s := sub.ListenerStates()
		return len(s) == 1 && !s[0].QueueMissing && s[0].ConsecutiveFailures == 0 && s[0].Status == transport.StatusAccepting
	})
}

// waveErrs reports the first failed wave whose error is ErrQueueNotFound.
type waveErrs struct {
	transport.NopObserver
	ch chan error
}

func (w waveErrs) WaveDone(_ string, _, _, _ int, err error) {
	if errors.Is(err, transport.ErrQueueNotFound) {
		select {
		case w.ch <- err:
		default:
		}
	}
}
