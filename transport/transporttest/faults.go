package transporttest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/faults"
	"github.com/berth-go/berth/transport"
)

// RunFaults injects a panic at each of the pipeline's fault points while a
// listener consumes, and proves that the fault is recorded (the listener
// reports faulted), the watchdog rebuilds the receiver within a check
// interval, the listener is healthy again, and every message is processed
// (a ledger: zero lost; a poison message is dead-lettered). A listener that
// was paused when its receiver faulted stays paused after the rebuild.
//
// The injector is process-wide: RunFaults must not run in parallel with
// other tests of the same package. NewPubSubWith should give the transport
// a short lease or visibility timeout (a few seconds), because a message
// whose settlement panicked is recovered by lease expiry.
func RunFaults(t *testing.T, c Config) {
	for _, p := range faults.Points {
		t.Run(string(p), func(t *testing.T) { testFault(t, c, p) })
	}
}

const poisonPayload = "poison"

func testFault(t *testing.T, c Config, point faults.Point) {
	if point == faults.DeadLetter && c.DeadLetters == nil {
		t.Skip("transport exposes no dead-letter listing")
	}
	inj := faults.New().Panic(point, 1)
	if point == faults.Receive {
		inj.Skip(point, 3) // let the observer attach first
	}
	if point == faults.Log {
		// Something must log: make one ack fail, and its log line panic.
		inj.Error(faults.Ack, errors.New("injected ack failure"), 1)
	}
	defer faults.Install(inj)()

	const n = 20
	cfg := transport.PipelineConfig{
		Concurrency:   4,
		BufferSize:    8,
		CheckInterval: 300 * time.Millisecond,
		MaxAttempts:   5,
		RetryDelay:    time.Millisecond,
		MaxRetryDelay: 10 * time.Millisecond,
		DrainTimeout:  time.Second,
	}
	cfg.Wave.EmptyDelay = 20 * time.Millisecond
	if point == faults.DeadLetter {
		cfg.MaxAttempts = 1
	}
	pub, sub := c.NewPubSubWith(t, cfg)
	defer closeAll(t, pub, sub)
	tp := topic(t)
	initialize(t, sub, tp)
	ids := publish(t, pub, tp, n)
	var poison string
	if point == faults.DeadLetter {
		m := message.NewMessage("poison-"+ids[0], []byte(poisonPayload))
		poison = m.UUID
		if err := pub.Publish(tp, m); err != nil {
			t.Fatal(err)
		}
	}
	ch, cancel := subscribe(t, sub, tp)
	defer cancel()
	l := listener(t, sub)

	// Observe the listener's state closely enough to see the faulted window.
	var (
		obsMu      sync.Mutex
		sawFault   bool
		sawPausedF bool
	)
	obsDone := make(chan struct{})
	var obsWG sync.WaitGroup
	obsWG.Add(1)
	go func() {
		defer obsWG.Done()
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-obsDone:
				return
			case <-tk.C:
			}
			s := l.State()
			obsMu.Lock()
			if s.Faulted && s.Status == transport.StatusFaulted {
				sawFault = true
			}
			if s.Rebuilds > 0 && s.Status == transport.StatusPaused {
				sawPausedF = true
			}
			obsMu.Unlock()
		}
	}()
	defer func() { close(obsDone); obsWG.Wait() }()

	if point == faults.Release {
		// Pause releases the buffer: the release panics, the receiver
		// faults, and the rebuilt listener must stay paused.
		eventually(t, "some messages buffered", func() bool { return l.State().Buffered > 0 })
		if err := l.Pause(context.Background()); err != nil {
			t.Logf("pause: %v", err)
		}
		eventually(t, "rebuilt while paused", func() bool {
			s := l.State()
			return s.Rebuilds >= 1 && !s.Faulted
		})
		if s := l.State(); s.Status != transport.StatusPaused {
			t.Fatalf("status after rebuild = %s, want paused", s.Status)
		}
		l.Resume()
	}

	var (
		mu      sync.Mutex
		handled = map[string]bool{}
	)
	consumed := make(chan struct{})
	var consWG sync.WaitGroup
	consWG.Add(1)
	go func() {
		defer consWG.Done()
		for m := range ch {
			switch {
			case string(m.Payload) == poisonPayload:
				m.Nack()
				continue
			case point == faults.Nack && m.Metadata.Get(transport.MetadataAttempt) == "1":
				m.Nack()
				continue
			}
			mu.Lock()
			handled[m.UUID] = true
			all := len(handled) == n
			mu.Unlock()
			m.Ack()
			if all {
				select {
				case <-consumed:
				default:
					close(consumed)
				}
			}
		}
	}()
	defer consWG.Wait()
	defer cancel()

	select {
	case <-consumed:
	case <-time.After(waitFor * 2):
		mu.Lock()
		got := len(handled)
		mu.Unlock()
		t.Fatalf("only %d of %d messages processed (state %+v)", got, n, l.State())
	}
	eventually(t, "fault injected at "+string(point), func() bool { return inj.Hits(point) > 0 })
	eventually(t, "receiver rebuilt and healthy", func() bool {
		s := l.State()
		return s.Rebuilds >= 1 && !s.Faulted && s.Status == transport.StatusAccepting && s.Fault != ""
	})
	obsMu.Lock()
	defer obsMu.Unlock()
	if !sawFault {
		t.Fatal("the listener never reported faulted")
	}
	if point == faults.Release && !sawPausedF {
		t.Fatal("the rebuilt listener was never seen paused")
	}
	if poison != "" {
		eventually(t, "poison dead-lettered", func() bool {
			for _, d := range c.DeadLetters(t, tp) {
				if d.UUID == poison {
					return true
				}
			}
			return false
		})
	}
	for _, id := range ids {
		if !handled[id] {
			t.Fatalf("message %s lost", id)
		}
	}
}
