package transport_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/mem"
	"github.com/berth-go/berth/transport/sqlite"
)

// TestTxFromContextRefusesWhatCannot: a message of a transport that cannot
// settle inside a SQL transaction (mem), and a context that is no message
// context, get ErrTxUnsupported from TxFromContext and CommitTx, and the
// message is settled as usual.
func TestTxFromContextRefusesWhatCannot(t *testing.T) {
	if _, err := transport.TxFromContext(context.Background()); !errors.Is(err, transport.ErrTxUnsupported) {
		t.Fatalf("TxFromContext(Background) = %v, want ErrTxUnsupported", err)
	}
	if err := transport.CommitTx(context.Background()); !errors.Is(err, transport.ErrTxUnsupported) {
		t.Fatalf("CommitTx(Background) = %v, want ErrTxUnsupported", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "mem://tx-" + t.Name()
	pub, err := transport.OpenPublisher(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := transport.OpenSubscriber(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("t", message.NewMessage("m1", nil)); err != nil {
		t.Fatal(err)
	}
	var m *message.Message
	select {
	case m = <-msgs:
	case <-ctx.Done():
		t.Fatal("no message")
	}
	if tx, err := transport.TxFromContext(m.Context()); tx != nil || !errors.Is(err, transport.ErrTxUnsupported) {
		t.Fatalf("TxFromContext on mem = %v, %v; want nil, ErrTxUnsupported", tx, err)
	}
	if err := transport.CommitTx(m.Context()); !errors.Is(err, transport.ErrTxUnsupported) {
		t.Fatalf("CommitTx on mem = %v, want ErrTxUnsupported", err)
	}
	m.Ack()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDBOf: a SQL publisher hands out the pool it writes to, through
// telemetry.Publisher too (on SQLite the process's shared connection of
// the file: the one sqlite.Open returns); mem's publisher has none.
func TestDBOf(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "dbof.db")
	raw, err := transport.OpenPublisher(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	shared, closer, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	for name, pub := range map[string]message.Publisher{"sqlite": raw, "telemetry over sqlite": telemetry.Publisher(raw, telemetry.Config{})} {
		db, err := transport.DBOf(pub)
		if err != nil {
			t.Fatalf("%s: DBOf = %v", name, err)
		}
		if db != shared {
			t.Errorf("%s: DBOf is not the process's pool of the file", name)
		}
	}
	mem, err := transport.OpenPublisher(ctx, "mem://dbof")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for name, pub := range map[string]message.Publisher{"mem": mem, "telemetry over mem": telemetry.Publisher(mem, telemetry.Config{})} {
		if db, err := transport.DBOf(pub); db != nil || !errors.Is(err, transport.ErrTxUnsupported) {
			t.Errorf("%s: DBOf = %v, %v; want nil, ErrTxUnsupported", name, db, err)
		}
	}
}
