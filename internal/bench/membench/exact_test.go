package membench

import (
	"context"
	"encoding/binary"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

var (
	exactHeld    = flag.Int("membench.exact", 0, "messages to hold for TestExactBytesPerHeldMessage (0 skips it)")
	exactProfile = flag.String("membench.exactprofile", "", "prefix of the heap profiles TestExactBytesPerHeldMessage writes (every allocation recorded)")
)

// TestExactBytesPerHeldMessage measures what one held message retains,
// exactly rather than as the flood's slope: -membench.exact messages of
// DefaultPayloadSize are preloaded, the consumer (a router with a
// batching.Handler, then batching.Consume) takes them all into batches
// whose BatchFunc blocks, and the live heap after a forced GC, less the
// live heap before the consumer started, is divided by the count. With
// -membench.exactprofile, it also writes heap profiles before and while
// holding, with every allocation recorded, for
//
//	go tool pprof -sample_index=inuse_space -top -base PREFIX-router-base.pprof PREFIX-router-held.pprof
//
// Run each form alone, in its own process: the runtime keeps the
// descriptors of exited goroutines for reuse, so a form measured after
// another would not pay for its goroutines:
//
//	go test -run 'TestExactBytesPerHeldMessage/router$' ./internal/bench/membench/ -membench.exact=3000 -v
//	go test -run 'TestExactBytesPerHeldMessage/consume$' ./internal/bench/membench/ -membench.exact=3000 -v
func TestExactBytesPerHeldMessage(t *testing.T) {
	if *exactHeld <= 0 {
		t.Skip("set -membench.exact=N to run")
	}
	if *exactProfile != "" {
		runtime.MemProfileRate = 1
		defer func() { runtime.MemProfileRate = 512 << 10 }()
	}
	for _, mode := range []Form{FormRouter, FormConsume, FormBatches} {
		t.Run(string(mode), func(t *testing.T) {
			per := exactRun(t, mode, *exactHeld)
			t.Logf("%s: %.0f bytes per held message (%.2f× the %d-byte payload)",
				mode, per, per/DefaultPayloadSize, DefaultPayloadSize)
		})
	}
}

func exactRun(t *testing.T, form Form, n int) float64 {
	db, closer, err := sqlite.Open(filepath.Join(t.TempDir(), "queue.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	const topic = "held"
	pub, err := sqlite.NewPublisher(sqlite.PublisherConfig{DB: db}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sc := sqlqueue.SubscriberConfig{DB: db}
	// Back-pressure out of the way: every message is held at once.
	sc.Pipeline = receiver.Config{MaxQueue: 2 * n, MaxAttempts: -1, DrainTimeout: 2 * time.Second}
	sub, err := sqlite.NewSubscriber(sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, preloadChunk*DefaultPayloadSize)
	for i := 0; i < n; i += preloadChunk {
		var msgs []*message.Message
		for j := i; j < min(i+preloadChunk, n); j++ {
			p := buf[(j-i)*DefaultPayloadSize : (j-i+1)*DefaultPayloadSize]
			binary.BigEndian.PutUint64(p, uint64(j))
			msgs = append(msgs, message.NewMessage(watermill.NewUUID(), p))
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	fn := func(ctx context.Context, _ []*message.Message) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}

	mode := string(form)
	before := exactLive()
	exactWriteProfile(t, mode, "base")
	stop, err := startConsumer(context.Background(), form, sub, topic, batching.Config{FlushTimeout: time.Second}, fn)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	defer close(release)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if ls := sub.Listeners(); len(ls) > 0 && ls[0].State().BatchPending == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not all %d messages held in time", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	held := exactLive()
	exactWriteProfile(t, mode, "held")
	return float64(held-before) / float64(n)
}

// exactLive is the live heap after two forced GCs.
func exactLive() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func exactWriteProfile(t *testing.T, mode, when string) {
	if *exactProfile == "" {
		return
	}
	f, err := os.Create(*exactProfile + "-" + mode + "-" + when + ".pprof")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}
