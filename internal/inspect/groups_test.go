package inspect_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// eachGroupSQL runs fn against a fresh SQLite file and a fresh PostgreSQL
// schema, with the URL that services would use.
func eachGroupSQL(t *testing.T, fn func(t *testing.T, u string, s *inspect.SQL)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			u := "sqlite://" + filepath.Join(t.TempDir(), "q.db") + "?"
			if kind == "postgres" {
				u = testenv.PostgresSchemaURL(t) + "&"
			}
			s, err := inspect.OpenSQL(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			fn(t, u, s)
		})
	}
}

func publish(t *testing.T, pub message.Publisher, topic, prefix string, n int) {
	t.Helper()
	for i := range n {
		if err := pub.Publish(topic, message.NewMessage(prefix+strconv.Itoa(i), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
}

func groupsOf(t *testing.T, s *inspect.SQL, topic string) (map[string]inspect.Group, inspect.GroupList) {
	t.Helper()
	l, err := s.Groups(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]inspect.Group{}
	for _, g := range l.Groups {
		m[g.Group] = g
	}
	return m, l
}

// subscribe opens a subscriber of group on u and subscribes it to topic.
func subscribe(t *testing.T, u, group, topic string) (transport.StatefulSubscriber, <-chan *message.Message) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sub, err := transport.OpenSubscriber(ctx, u, transport.WithConsumerGroup(group))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = sub.Close() })
	return sub, ch
}

func receiveN(t *testing.T, ch <-chan *message.Message, n int, ack bool) []*message.Message {
	t.Helper()
	var got []*message.Message
	timeout := time.After(30 * time.Second)
	for len(got) < n {
		select {
		case m := <-ch:
			if ack {
				m.Ack()
			}
			got = append(got, m)
		case <-timeout:
			t.Fatalf("received %d of %d", len(got), n)
		}
	}
	return got
}

// Groups lists each group with its counts and its last reader: a group
// read by a subscriber reporting to the fleet table is "fleet" and live;
// one whose reader holds a message (no fleet reporting) is "lease"; one
// registered ahead and never read is "never", with its oldest message's
// age.
func TestGroupsLastReader(t *testing.T) {
	eachGroupSQL(t, func(t *testing.T, u string, s *inspect.SQL) {
		ctx := context.Background()
		if _, _, err := s.Migrate(ctx, sqlqueue.QueueRef{Topic: "orders", ConsumerGroup: "audit"}); err != nil {
			t.Fatal(err)
		}
		_, billing := subscribe(t, u+"fleet_interval=100ms", "billing", "orders")
		_, shipping := subscribe(t, u, "shipping", "orders")
		pub, err := transport.OpenPublisher(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		publish(t, pub, "orders", "m", 5)
		receiveN(t, billing, 5, true)
		held := receiveN(t, shipping, 1, false) // in flight, never settled
		defer held[0].Nack()

		var gs map[string]inspect.Group
		var list inspect.GroupList
		for deadline := time.Now().Add(20 * time.Second); ; {
			gs, list = groupsOf(t, s, "orders")
			if b := gs["billing"]; b.LastReader.Basis == inspect.ReadByFleet && b.Ready+b.InFlight == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("billing never reported by the fleet: %+v", gs["billing"])
			}
			time.Sleep(50 * time.Millisecond) // polling the database, not synchronising goroutines
		}
		if len(list.Groups) != 3 || list.Reporting == 0 {
			t.Fatalf("groups: %+v", list)
		}
		if b := gs["billing"]; !b.LastReader.Live || b.LastReader.Instance == "" || time.Since(b.LastReader.At) > time.Minute {
			t.Errorf("billing: %+v", b.LastReader)
		}
		a := gs["audit"]
		if a.Ready != 5 || a.InFlight != 0 || a.OldestAge <= 0 || a.OldestAge > time.Minute || a.LastReader.Basis != inspect.ReadNever {
			t.Errorf("audit: %+v", a)
		}
		if a.Queue != sqlqueue.QueueFor(s.Dialect, s.Tables, "orders", "audit").Name {
			t.Errorf("audit's queue: %s", a.Queue)
		}
		sh := gs["shipping"]
		if sh.InFlight == 0 || sh.LastReader.Basis != inspect.ReadByLease || sh.LastReader.Live || sh.LastReader.At.IsZero() {
			t.Errorf("shipping: %+v", sh)
		}
		if other, _ := groupsOf(t, s, "emails"); len(other) != 0 {
			t.Errorf("groups of another topic: %+v", other)
		}
	})
}

// RetireGroup refuses a group with messages (saying how many) and one with
// a live reader, changing nothing; with Force it unregisters and drops
// the group, and a publisher that had the group cached publishes nothing
// more to it (no table made again, no subscription); a second retire is
// harmless.
func TestRetireGroup(t *testing.T) {
	eachGroupSQL(t, func(t *testing.T, u string, s *inspect.SQL) {
		ctx := context.Background()
		if _, _, err := s.Migrate(ctx, sqlqueue.QueueRef{Topic: "orders", ConsumerGroup: "audit"}); err != nil {
			t.Fatal(err)
		}
		_, billing := subscribe(t, u+"fleet_interval=100ms", "billing", "orders")
		pub, err := transport.OpenPublisher(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		publish(t, pub, "orders", "a", 3)
		receiveN(t, billing, 3, true)
		audit := sqlqueue.QueueFor(s.Dialect, s.Tables, "orders", "audit").Name

		_, err = s.RetireGroup(ctx, "orders", "audit", inspect.RetireOptions{})
		var full *inspect.GroupNotEmptyError
		if !errors.Is(err, inspect.ErrGroupNotEmpty) || !errors.As(err, &full) || full.Ready != 3 || full.Unregistered {
			t.Fatalf("retire with messages: %v", err)
		}
		if gs, _ := groupsOf(t, s, "orders"); gs["audit"].Ready != 3 {
			t.Fatalf("a refused retire changed the group: %+v", gs["audit"])
		}

		// Billing is empty: until its reader's first fleet report, a retire
		// without Force would retire it, so wait for the report first.
		for deadline := time.Now().Add(20 * time.Second); ; {
			if gs, _ := groupsOf(t, s, "orders"); gs["billing"].LastReader.Live {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("billing's reader never reported")
			}
			time.Sleep(50 * time.Millisecond) // polling interval
		}
		_, err = s.RetireGroup(ctx, "orders", "billing", inspect.RetireOptions{})
		var inUse *inspect.GroupInUseError
		if !errors.As(err, &inUse) || len(inUse.Readers) == 0 {
			t.Fatalf("retire with a live reader: %v", err)
		}

		publish(t, pub, "orders", "b", 1) // the publisher's cache holds audit now
		r, err := s.RetireGroup(ctx, "orders", "audit", inspect.RetireOptions{Force: true})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Unregistered || !r.Dropped || r.DroppedMessages != 4 || r.Queue != audit || r.Parking || r.Reregistered || r.Waited != inspect.DefaultRetireGrace {
			t.Fatalf("retired: %+v", r)
		}
		publish(t, pub, "orders", "c", 4)
		receiveN(t, billing, 5, true)
		gs, _ := groupsOf(t, s, "orders")
		if _, ok := gs["audit"]; ok || len(gs) != 1 {
			t.Fatalf("groups after retire: %+v", gs)
		}
		if _, err := s.Queue(ctx, audit); !errors.Is(err, transport.ErrQueueNotFound) {
			t.Fatalf("the retired queue after publishing: %v", err)
		}

		again, err := s.RetireGroup(ctx, "orders", "audit", inspect.RetireOptions{})
		if err != nil || again.Unregistered || again.Dropped {
			t.Fatalf("second retire: %+v, %v", again, err)
		}
		if _, err := s.RetireGroup(ctx, "orders", "", inspect.RetireOptions{}); !errors.Is(err, transport.ErrInvalidConfig) {
			t.Fatalf("retire of the default reader: %v", err)
		}
	})
}

// Retiring a topic's last group leaves it parking: what is published next
// waits in the default queue for groups registered later, and the retired
// group's queue gets nothing.
func TestRetireLastGroupParks(t *testing.T) {
	eachGroupSQL(t, func(t *testing.T, u string, s *inspect.SQL) {
		ctx := context.Background()
		if _, _, err := s.Migrate(ctx, sqlqueue.QueueRef{Topic: "orders", ConsumerGroup: "audit"}); err != nil {
			t.Fatal(err)
		}
		r, err := s.RetireGroup(ctx, "orders", "audit", inspect.RetireOptions{Grace: -1})
		if err != nil || !r.Unregistered || !r.Dropped || !r.Parking {
			t.Fatalf("retire: %+v, %v", r, err)
		}
		pub, err := transport.OpenPublisher(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		publish(t, pub, "orders", "p", 2)
		qs, err := s.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 1 || qs[0].Topic != "orders" || !qs[0].Parked || qs[0].Ready != 2 {
			t.Fatalf("queues: %+v", qs)
		}
		if _, err := s.Queue(ctx, r.Queue); !errors.Is(err, transport.ErrQueueNotFound) {
			t.Fatalf("the retired queue: %v", err)
		}
	})
}

// A publisher whose cached subscriptions still name a group retired without
// a wait (its table dropped at once) does not make the table again, nor
// register it as the topic's default reader: the insert that finds the
// table missing reads the subscriptions again and publishes to what is
// subscribed now.
func TestRetiredGroupStaysRetiredForACachingPublisher(t *testing.T) {
	eachGroupSQL(t, func(t *testing.T, u string, s *inspect.SQL) {
		ctx := context.Background()
		for _, g := range []string{"audit", "billing"} {
			if _, _, err := s.Migrate(ctx, sqlqueue.QueueRef{Topic: "orders", ConsumerGroup: g}); err != nil {
				t.Fatal(err)
			}
		}
		pub, err := transport.OpenPublisher(ctx, u+"subscriptions_ttl=1m")
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		publish(t, pub, "orders", "a", 1) // caches audit and billing
		if _, err := s.RetireGroup(ctx, "orders", "audit", inspect.RetireOptions{Force: true, Grace: -1}); err != nil {
			t.Fatal(err)
		}
		publish(t, pub, "orders", "b", 2)
		gs, _ := groupsOf(t, s, "orders")
		if len(gs) != 1 || gs["billing"].Ready != 3 {
			t.Fatalf("groups after publishing past the retire: %+v", gs)
		}
		audit := sqlqueue.QueueFor(s.Dialect, s.Tables, "orders", "audit").Name
		if _, err := s.Queue(ctx, audit); !errors.Is(err, transport.ErrQueueNotFound) {
			t.Fatalf("the retired queue after publishing: %v", err)
		}
	})
}
