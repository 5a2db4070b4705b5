package sqlqueuetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// testHandlerTx is the ledger of the handler's transaction
// (transport.TxFromContext): every message's handler adds 1 to the
// message's row of a user table inside the transaction, and each message
// meets one of these fates on its first attempt:
//
//	i%6 == 0: commits with its ack (the router's ack after the handler)
//	i%6 == 1: also publishes an echo through the transaction, then nacks:
//	          both roll back, and the retry writes and echoes again
//	i%6 == 2: its lease is taken over before it writes (another consumer
//	          took the row): the ack finds the lease lost, the write rolls
//	          back, and the row is redelivered once its lease expires
//	i%6 == 3: CommitTx commits before the handler returns, which then
//	          fails: the nack changes nothing (no redelivery)
//	i%6 == 4: as 2, with CommitTx, which reports ErrLeaseLost
//	i%6 == 5: never asks for the transaction (the batched ack)
//
// Every counter must end at exactly 1 except the sixth's (0), and every
// echo must be in the echo topic exactly once.
func testHandlerTx(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 4)
	pub := f.newPub(t, db)
	ledger := "ledger_" + watermill.NewShortUUID()
	if _, err := db.Exec(`CREATE TABLE ` + ledger + ` (k VARCHAR(64) NOT NULL PRIMARY KEY, n INT NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	c := f.subConfig(db)
	c.Lease = time.Second // a stolen row returns within about a second
	c.SweepInterval = 100 * time.Millisecond
	c.Pipeline.Concurrency = 4
	sub := f.newSubscriber(t, c)
	if err := sub.SubscribeInitialize("tx_echo"); err != nil {
		t.Fatal(err)
	}
	if err := sub.SubscribeInitialize("tx_ledger"); err != nil {
		t.Fatal(err)
	}
	const n = 36
	ids := PublishN(t, pub, "tx_ledger", n)
	for _, id := range ids {
		if _, err := db.Exec(`INSERT INTO `+ledger+` (k, n) VALUES (`+f.ph(1)+`, 0)`, id); err != nil {
			t.Fatal(err)
		}
	}
	table := sub.Queue("tx_ledger").Table

	var (
		mu        sync.Mutex
		delivered = map[string]int{}
		failures  []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	handle := func(m *message.Message) error {
		i, _ := strconv.Atoi(m.Metadata.Get("i"))
		first := m.Metadata.Get(transport.MetadataAttempt) == "1"
		mu.Lock()
		delivered[m.UUID]++
		mu.Unlock()
		ctx := m.Context()
		if i%6 == 5 {
			return nil
		}
		if first && (i%6 == 2 || i%6 == 4) {
			// Another consumer took the row over: its owner token changed.
			if _, err := db.ExecContext(ctx, `UPDATE `+table+` SET owner = owner + 1 WHERE uuid = `+f.ph(1), m.UUID); err != nil {
				return err
			}
		}
		tx, err := transport.TxFromContext(ctx)
		if err != nil {
			fail("message %d: TxFromContext: %v", i, err)
			return err
		}
		if again, err := transport.TxFromContext(ctx); err != nil || again != tx {
			fail("message %d: a second TxFromContext gave another transaction (%v)", i, err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+ledger+` SET n = n + 1 WHERE k = `+f.ph(1), m.UUID); err != nil {
			return err
		}
		switch {
		case i%6 == 1:
			echo := message.NewMessage("echo-"+m.UUID, nil)
			txPub, err := transport.PublishInTx(pub, tx)
			if err == nil {
				err = txPub.Publish("tx_echo", echo)
			}
			if err != nil {
				fail("message %d: publish in the handler transaction: %v", i, err)
				return err
			}
			if first {
				return errors.New("fails after writing and publishing")
			}
		case i%6 == 3:
			if err := transport.CommitTx(ctx); err != nil {
				fail("message %d: CommitTx = %v, want nil", i, err)
			}
			if _, err := transport.TxFromContext(ctx); err == nil {
				fail("message %d: TxFromContext after CommitTx gave a transaction", i)
			}
			return errors.New("fails after CommitTx: changes nothing")
		case i%6 == 4 && first:
			if err := transport.CommitTx(ctx); !errors.Is(err, transport.ErrLeaseLost) {
				fail("message %d: CommitTx after a takeover = %v, want ErrLeaseLost", i, err)
			}
		}
		return nil
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, "tx_ledger")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range ch {
				if handle(m) == nil {
					m.Ack()
				} else {
					m.Nack()
				}
			}
		}()
	}
	waitFor(t, 60*time.Second, "every ledger message settled", func() bool {
		var left int
		if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	cancel()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, s := range failures {
		t.Error(s)
	}

	counts := map[string]int{}
	rows, err := db.Query(`SELECT k, n FROM ` + ledger)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var v int
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		counts[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	echoes := uuids(t, db, sub.Queue("tx_echo").Table)
	var wantEchoes []string
	for i, id := range ids {
		want := 1
		if i%6 == 5 {
			want = 0
		}
		if counts[id] != want {
			t.Errorf("message %d (fate %d): counter %d, want %d (delivered %d times)", i, i%6, counts[id], want, delivered[id])
		}
		if i%6 == 1 {
			wantEchoes = append(wantEchoes, "echo-"+id)
		}
		wantDeliveries := 1
		if i%6 == 1 || i%6 == 2 || i%6 == 4 {
			wantDeliveries = 2
		}
		if delivered[id] != wantDeliveries {
			t.Errorf("message %d (fate %d): delivered %d times, want %d", i, i%6, delivered[id], wantDeliveries)
		}
	}
	exactly(t, "echo topic", echoes, wantEchoes)
}
