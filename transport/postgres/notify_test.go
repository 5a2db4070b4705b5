package postgres_test

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// notifyCounter is a LISTEN connection of the test's own on
// postgres.WakeChannel, counting the notifications whose payload is one
// queue table's name.
type notifyCounter struct {
	conn   *pgx.Conn
	notes  chan string
	cancel context.CancelFunc
	done   chan struct{}
}

func listenWake(t *testing.T) *notifyCounter {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+postgres.WakeChannel); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	n := &notifyCounter{conn: conn, notes: make(chan string, 100000), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		for {
			note, err := conn.WaitForNotification(wctx)
			if err != nil {
				return
			}
			n.notes <- note.Payload
		}
	}()
	t.Cleanup(func() {
		n.cancel()
		<-n.done
		_ = conn.Close(context.Background())
	})
	return n
}

// countUntilMarker sends a notification with a payload of its own after
// everything the test published and counts the notifications of table
// before it: notifications are delivered in commit order, so once the
// marker arrives every earlier one has.
func (n *notifyCounter) countUntilMarker(t *testing.T, table string) int {
	t.Helper()
	marker := "marker_" + uniqueName(t)
	if _, err := postgresExec(t, `SELECT pg_notify('`+postgres.WakeChannel+`', $1)`, marker); err != nil {
		t.Fatal(err)
	}
	count := 0
	timeout := time.After(30 * time.Second)
	for {
		select {
		case p := <-n.notes:
			switch p {
			case marker:
				return count
			case table:
				count++
			}
		case <-timeout:
			t.Fatal("the marker notification did not arrive")
		}
	}
}

func postgresExec(t *testing.T, sql string, args ...any) (int64, error) {
	conn, err := pgx.Connect(context.Background(), testenv.PostgresURL(t))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	tag, err := conn.Exec(context.Background(), sql, args...)
	return tag.RowsAffected(), err
}

func uniqueName(t *testing.T) string {
	var b [4]byte
	if _, err := crand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// A burst of publishes from one publisher sends at most one NOTIFY per
// NotifyWindow (plus the trailing one), far fewer than one per message;
// every message still arrives in the table.
func TestNotifyCoalescesBurst(t *testing.T) {
	const (
		n      = 100
		window = 200 * time.Millisecond
	)
	db := openDB(t, 4)
	listener := listenWake(t)
	topic := "burst_" + uniqueName(t)
	pub := newPub(t, db, func(c *sqlqueue.PublisherConfig) { c.NotifyWindow = window })
	start := time.Now()
	for i := range n {
		if err := pub.Publish(topic, message.NewMessage(fmt.Sprint(i), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	// Close sends the trailing notification still pending.
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	table := sqlqueue.QueueTableName(sqlqueue.DefaultTablePrefix, topic, "")
	got := listener.countUntilMarker(t, table)
	bound := int(elapsed/window) + 2 // one per window begun, and the trailing one
	t.Logf("%d publishes in %s: %d notifications (bound %d)", n, elapsed, got, bound)
	if got < 1 || got > bound || got > n/2 {
		t.Fatalf("%d publishes in %s sent %d notifications; want 1 to min(%d, %d)", n, elapsed, got, bound, n/2)
	}
	var rows int
	if err := db.QueryRow(`SELECT count(*) FROM ` + postgres.Dialect{}.QuoteIdent(table)).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Fatalf("%d rows in the queue, want %d", rows, n)
	}
}

// A negative NotifyWindow sends one NOTIFY per insert, as before
// coalescing.
func TestNotifyWindowOffNotifiesEveryInsert(t *testing.T) {
	const n = 20
	db := openDB(t, 4)
	listener := listenWake(t)
	topic := "every_" + uniqueName(t)
	pub := newPub(t, db, func(c *sqlqueue.PublisherConfig) { c.NotifyWindow = -1 })
	for i := range n {
		if err := pub.Publish(topic, message.NewMessage(fmt.Sprint(i), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	table := sqlqueue.QueueTableName(sqlqueue.DefaultTablePrefix, topic, "")
	if got := listener.countUntilMarker(t, table); got != n {
		t.Fatalf("%d publishes sent %d notifications, want %d", n, got, n)
	}
}

// A subscriber on another pool (another process: no in-process wake-up)
// whose polls are off (an empty delay and idle probe of an hour) receives
// the messages of a burst that left their NOTIFY out: the trailing
// notification, sent by the open publisher at the end of its window, wakes
// it.
func TestNotifyTrailingWakesOtherPool(t *testing.T) {
	const burst = 20
	url := testenv.PostgresSchemaURL(t)
	pubDB, err := postgres.Open(url, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pubDB.Close()
	subDB, err := postgres.Open(url, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer subDB.Close()
	pub := newPub(t, pubDB, func(c *sqlqueue.PublisherConfig) { c.NotifyWindow = 500 * time.Millisecond })
	topic := "trail_" + uniqueName(t)

	c := sqlqueue.SubscriberConfig{DB: subDB, SweepInterval: -1, IdleProbeMax: time.Hour}
	c.Pipeline.EmptyDelay = time.Hour // only wake-ups deliver
	sub, err := postgres.NewSubscriber(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ch {
			received.Add(1)
			m.Ack()
		}
	}()
	defer func() { cancel(); _ = sub.Close(); <-done }()

	// The first message carries its NOTIFY (or the subscriber's first
	// claim finds it). The claim that found it came back short of its
	// wave, so the subscriber waits for a wake-up from then on.
	if err := pub.Publish(topic, message.NewMessage("first", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return received.Load() == 1 })

	// The burst, within the first message's window: these inserts leave
	// their NOTIFY out; only the trailing one can wake the subscriber.
	for i := range burst {
		if err := pub.Publish(topic, message.NewMessage(fmt.Sprint(i), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, func() bool { return received.Load() == 1+burst })
}
