package transporttest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/subopt"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// RunFaults injects a panic at each of the pipeline's fault points while a
// listener consumes, and proves that the fault is recorded (the listener
// reports faulted), the watchdog rebuilds the receiver within a check
// interval, the listener is healthy again, and every message is processed
// (a ledger: zero lost; a poison message is dead-lettered). A listener that
// was paused when its receiver faulted stays paused after the rebuild.
//
// Faults are injected through decorators of the listener's own source and
// logger (FaultySource, PanickingLogger), so the cases run in parallel with
// each other and with other tests. NewPubSubWith should give the transport
// a short lease or visibility timeout (a few seconds), because a message
// whose settlement panicked is recovered by lease expiry.
func RunFaults(t *testing.T, c Config) {
	for _, p := range Points {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			testFault(t, c, p)
		})
	}
}

const poisonPayload = "poison"

func testFault(t *testing.T, c Config, point Point) {
	if point == AtDeadLetter && c.DeadLetters == nil {
		t.Skip("transport exposes no dead-letter listing")
	}
	inj := NewFaults()
	if point == AtLog {
		// Something must log: make one ack fail, and its log line panic.
		inj.Error(AtAck, 1)
	}

	const n = 20
	cfg := receiver.Config{
		Concurrency:   4,
		BufferSize:    8,
		CheckInterval: 300 * time.Millisecond,
		MaxAttempts:   5,
		RetryDelay:    time.Millisecond,
		MaxRetryDelay: 10 * time.Millisecond,
		DrainTimeout:  time.Second,
	}
	cfg.EmptyDelay = 20 * time.Millisecond
	if point == AtDeadLetter {
		cfg.MaxAttempts = 1
	}
	rec := &faultRecorder{}
	cfg.Observer = rec
	pub, sub := c.NewPubSubWith(t, cfg)
	defer closeAll(t, pub, sub)
	tp := topic(t)
	initialize(t, sub, tp)
	ids := publish(t, pub, tp, n)
	var poison string
	if point == AtDeadLetter {
		m := message.NewMessage("poison-"+ids[0], []byte(poisonPayload))
		poison = m.UUID
		if err := pub.Publish(tp, m); err != nil {
			t.Fatal(err)
		}
	}
	ctx := subopt.With(context.Background(), subopt.Options{
		WrapSource: func(src transport.Source) transport.Source { return FaultySource(src, inj) },
		WrapLogger: func(l watermill.LoggerAdapter) watermill.LoggerAdapter { return PanickingLogger(l, inj) },
	})
	ch, cancel := subscribeCtx(t, ctx, sub, tp)
	defer cancel()
	l := listener(t, sub)
	rec.attach(l)
	// Inject only once the recorder can see the listener.
	inj.Panic(point, 1)

	if point == AtRelease {
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
			case point == AtNack && m.Metadata.Get(transport.MetadataAttempt) == "1":
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
	// The observer hears of the rebuild after State shows it.
	eventually(t, "rebuild observed", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.rebuilds > 0
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.faults) == 0 {
		t.Fatal("no fault was recorded")
	}
	if !rec.reportedFaulted {
		t.Fatalf("the listener did not report faulted when the fault was recorded (faults %v)", rec.faults)
	}
	if rec.rebuilds == 0 {
		t.Fatal("no rebuild was observed")
	}
	if point == AtRelease && !rec.pausedAfterRebuild {
		t.Fatal("the rebuilt listener was not paused")
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

// faultRecorder observes faults and rebuilds as they happen, and what the
// listener reported at that moment: a fault window is short (half a check
// interval), too short to catch reliably by polling on a loaded machine.
type faultRecorder struct {
	transport.NopObserver
	mu                 sync.Mutex
	l                  *receiver.Listener
	faults             []string
	reportedFaulted    bool
	rebuilds           int
	pausedAfterRebuild bool
}

func (r *faultRecorder) attach(l *receiver.Listener) {
	r.mu.Lock()
	r.l = l
	r.mu.Unlock()
}

func (r *faultRecorder) state() (transport.ListenerState, bool) {
	r.mu.Lock()
	l := r.l
	r.mu.Unlock()
	if l == nil {
		return transport.ListenerState{}, false
	}
	return l.State(), true
}

func (r *faultRecorder) Faulted(_ string, f *transport.Fault) {
	s, ok := r.state()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, f.Stage)
	if ok && s.Faulted && s.Status == transport.StatusFaulted {
		r.reportedFaulted = true
	}
}

func (r *faultRecorder) Rebuilt(string) {
	s, ok := r.state()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rebuilds++
	if ok && s.Status == transport.StatusPaused {
		r.pausedAfterRebuild = true
	}
}
