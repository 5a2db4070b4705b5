package sqlqueuetest

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/transporttest"
)

// RunFleet runs the fleet cases (sqlqueue.FleetDialect, the reporter of
// SubscriberConfig.FleetInterval, pause and resume across processes) on a
// dialect, in parallel; only h.Dialect and h.Open are used.
func RunFleet(t *testing.T, h Harness) {
	if _, ok := h.Dialect.(sqlqueue.FleetDialect); !ok {
		t.Fatalf("%s does not implement sqlqueue.FleetDialect", h.Dialect.Name())
	}
	t.Run("FaultedListenerShowsFaulted", func(t *testing.T) { t.Parallel(); testFleetFaulted(t, h) })
	t.Run("Store", func(t *testing.T) { t.Parallel(); testFleetStore(t, h) })
	t.Run("PauseStopsEveryProcess", func(t *testing.T) { t.Parallel(); testFleetPause(t, h) })
	t.Run("OneUpsertPerListenerPerInterval", func(t *testing.T) { t.Parallel(); testFleetCost(t, h) })
}

const fleetInterval = 100 * time.Millisecond

func (f *fixture) names() sqlqueue.Names { return sqlqueue.NamesFor(f.h.Dialect, f.env.Tables) }

func (f *fixture) listeners(t *testing.T, db *sql.DB) ([]sqlqueue.ListenerRow, time.Time) {
	t.Helper()
	rows, now, err := sqlqueue.ReadListeners(context.Background(), db, f.h.Dialect, f.names())
	if err != nil {
		t.Fatal(err)
	}
	return rows, now
}

func (f *fixture) exec(t *testing.T, db *sql.DB, st sqlqueue.Stmt) int {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), st.SQL, st.Args...)
	if err != nil {
		t.Fatalf("%s: %v", st.SQL, err)
	}
	defer rows.Close()
	n := 0
	for {
		for rows.Next() {
			n++
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", st.SQL, err)
	}
	return n
}

// The store's statements on a real database: missing tables read as
// empty, the DDL is idempotent, the upsert inserts then updates, every
// column round-trips, stale rows go and fresh ones stay, pause and resume
// report whether they changed anything.
func testFleetStore(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 2)
	ctx := context.Background()
	d, n := f.h.Dialect, f.names()
	fd := d.(sqlqueue.FleetDialect)

	if rows, _ := f.listeners(t, db); len(rows) != 0 {
		t.Fatalf("no table yet, rows %v", rows)
	}
	if ps, err := sqlqueue.PausedQueues(ctx, db, d, n); err != nil || len(ps) != 0 {
		t.Fatalf("no table yet: %v, %v", ps, err)
	}
	// Pausing creates the tables.
	if changed, err := sqlqueue.PauseQueue(ctx, db, d, n, "berth_q_a", "ops: deploy"); err != nil || !changed {
		t.Fatalf("first pause: %v, %v", changed, err)
	}
	if changed, err := sqlqueue.PauseQueue(ctx, db, d, n, "berth_q_a", "again"); err != nil || changed {
		t.Fatalf("second pause: changed=%v, %v; want no change", changed, err)
	}
	for range 2 {
		if err := sqlqueue.EnsureFleet(ctx, db, d, n); err != nil {
			t.Fatalf("EnsureFleet is not idempotent: %v", err)
		}
	}
	ps, err := sqlqueue.PausedQueues(ctx, db, d, n)
	if err != nil || len(ps) != 1 || ps[0].Queue != "berth_q_a" || ps[0].By != "ops: deploy" || time.Since(ps[0].PausedAt).Abs() > time.Minute {
		t.Fatalf("paused rows %+v, %v", ps, err)
	}

	at := time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli())
	row := sqlqueue.ListenerRow{
		Instance: "host/1/ab", Name: "orders/billing", Queue: "berth_q_orders__billing", Host: "host", PID: 1,
		Status: "accepting", Loop: "running", Wave: 8, Buffered: 3, InFlight: 2, BatchPending: 1,
		Rebuilds: 0, LastReceive: at.Add(time.Second), StartedAt: at, Interval: time.Hour,
	}
	if got := f.exec(t, db, fd.UpsertListener(n, row)); got != 0 {
		t.Fatalf("upsert returned %d rows", got)
	}
	row.Status, row.Loop, row.Latched, row.Faulted, row.Fault, row.FaultAt, row.Rebuilds, row.Buffered =
		"faulted", "faulted", true, true, "panic: café", at.Add(2*time.Second), 2, 0
	f.exec(t, db, fd.UpsertListener(n, row))
	other := row
	other.Instance, other.Name, other.Interval, other.LastReceive, other.FaultAt, other.Fault, other.Faulted = "host/2/cd", "emails", time.Millisecond, time.Time{}, time.Time{}, "", false
	f.exec(t, db, fd.UpsertListener(n, other))

	rows, now := f.listeners(t, db)
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want 2", rows)
	}
	var got sqlqueue.ListenerRow
	for _, r := range rows {
		if r.Instance == row.Instance {
			got = r
		}
	}
	if now.IsZero() || got.UpdatedAt.After(now) || now.Sub(got.UpdatedAt) > time.Minute {
		t.Fatalf("updated_at %v, database now %v", got.UpdatedAt, now)
	}
	want := row
	want.UpdatedAt = got.UpdatedAt
	if !sameRow(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}

	// The row with a 1ms interval goes stale at once (ten intervals); the
	// hour-interval row stays.
	waitFor(t, 10*time.Second, "the short-interval row to age ten intervals", func() bool {
		rows, now := f.listeners(t, db)
		for _, r := range rows {
			if r.Instance == other.Instance {
				return now.Sub(r.UpdatedAt) > 10*time.Millisecond
			}
		}
		return false
	})
	f.exec(t, db, fd.DeleteStaleListeners(n))
	if rows, _ := f.listeners(t, db); len(rows) != 1 || rows[0].Instance != row.Instance {
		t.Fatalf("after the stale sweep: %+v, want only %s", rows, row.Instance)
	}
	f.exec(t, db, fd.DeleteListeners(n, "someone/else"))
	if rows, _ := f.listeners(t, db); len(rows) != 1 {
		t.Fatalf("another instance's delete took rows: %+v", rows)
	}
	f.exec(t, db, fd.DeleteListeners(n, row.Instance))
	if rows, _ := f.listeners(t, db); len(rows) != 0 {
		t.Fatalf("after its own delete: %+v", rows)
	}

	if changed, err := sqlqueue.ResumeQueue(ctx, db, d, n, "berth_q_a"); err != nil || !changed {
		t.Fatalf("resume: %v, %v", changed, err)
	}
	if changed, err := sqlqueue.ResumeQueue(ctx, db, d, n, "berth_q_a"); err != nil || changed {
		t.Fatalf("second resume: changed=%v, %v; want no change", changed, err)
	}
	if ps, _ := sqlqueue.PausedQueues(ctx, db, d, n); len(ps) != 0 {
		t.Fatalf("after resume: %+v", ps)
	}
}

func sameRow(a, b sqlqueue.ListenerRow) bool {
	eq := func(x, y time.Time) bool { return x.Equal(y) }
	return a.Instance == b.Instance && a.Name == b.Name && a.Queue == b.Queue && a.Host == b.Host && a.PID == b.PID &&
		a.Status == b.Status && a.Loop == b.Loop && a.Wave == b.Wave && a.Buffered == b.Buffered &&
		a.InFlight == b.InFlight && a.BatchPending == b.BatchPending && a.Latched == b.Latched &&
		a.Faulted == b.Faulted && a.Fault == b.Fault && eq(a.FaultAt, b.FaultAt) && a.Rebuilds == b.Rebuilds &&
		eq(a.LastReceive, b.LastReceive) && eq(a.StartedAt, b.StartedAt) && a.Interval == b.Interval &&
		eq(a.UpdatedAt, b.UpdatedAt)
}

// fleetSub starts a subscriber reporting every fleetInterval on db that
// counts (and acks) what it handles of topic.
func (f *fixture) fleetSub(t *testing.T, db *sql.DB, topic string, handled *atomic.Int64) *sqlqueue.Subscriber {
	t.Helper()
	c := f.subConfig(db)
	c.FleetInterval = fleetInterval
	c.Pipeline.BufferSize = 16
	sub := f.newSubscriber(t, c)
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for m := range ch {
			handled.Add(1)
			m.Ack()
		}
	}()
	return sub
}

// pausedAndEmpty reports whether every listener of sub is paused and holds
// no prefetched row.
func pausedAndEmpty(sub *sqlqueue.Subscriber) bool {
	sts := sub.ListenerStates()
	for _, st := range sts {
		if st.Status != transport.StatusPaused || st.Buffered != 0 {
			return false
		}
	}
	return len(sts) > 0
}

// Two subscribers on two pools (two processes, as far as the database can
// tell) consume one queue. A paused row stops both: each reports paused
// with nothing buffered, and messages published meanwhile stay pending
// while both report several more intervals; the resume drains them.
func testFleetPause(t *testing.T, h Harness) {
	f := h.open(t)
	db1, db2 := f.pool(t, 4), f.pool(t, 4)
	pub := f.newPub(t, db1)
	const topic = "fleet_pause"
	var handled atomic.Int64
	a := f.fleetSub(t, db1, topic, &handled)
	b := f.fleetSub(t, db2, topic, &handled)
	q := a.Queue(topic)
	PublishN(t, pub, topic, 20)
	waitFor(t, 20*time.Second, "the first 20 messages", func() bool { return handled.Load() == 20 })

	ctx := context.Background()
	if _, err := sqlqueue.PauseQueue(ctx, db1, f.h.Dialect, f.names(), q.Name, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "both subscribers paused with nothing buffered", func() bool {
		return pausedAndEmpty(a) && pausedAndEmpty(b)
	})
	waitFor(t, 10*time.Second, "the listeners table to say paused", func() bool {
		rows, _ := f.listeners(t, db2)
		n := 0
		for _, r := range rows {
			if r.Queue == q.Name && r.Status == "paused" && r.Buffered == 0 {
				n++
			}
		}
		return n == 2
	})
	before := handled.Load()
	PublishN(t, pub, topic, 10)
	// Both reporters go through three more intervals, each reading the
	// paused row again.
	ta, tb := a.FleetStats().Ticks, b.FleetStats().Ticks
	waitFor(t, 10*time.Second, "three more intervals on both", func() bool {
		return a.FleetStats().Ticks >= ta+3 && b.FleetStats().Ticks >= tb+3
	})
	if got := handled.Load(); got != before {
		t.Fatalf("%d messages handled while the queue was paused", got-before)
	}
	if st := RowStates(t, db1, q.Table); st[sqlqueue.StatePending] != 10 || len(st) != 1 {
		t.Fatalf("rows while paused %v, want 10 pending and nothing claimed", st)
	}
	if _, err := sqlqueue.ResumeQueue(ctx, db2, f.h.Dialect, f.names(), q.Name); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the 10 messages published while paused", func() bool { return handled.Load() == 30 })
	// One subscriber may have drained them before the other's next
	// interval: both resume within one.
	waitFor(t, 10*time.Second, "both subscribers resumed", func() bool {
		for _, s := range []*sqlqueue.Subscriber{a, b} {
			for _, st := range s.ListenerStates() {
				if st.Status == transport.StatusPaused {
					return false
				}
			}
		}
		return true
	})
	// Close deletes each subscriber's rows.
	ia := a.FleetStats().Instance
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, r := range func() []sqlqueue.ListenerRow { rows, _ := f.listeners(t, db2); return rows }() {
		if r.Instance == ia {
			t.Fatalf("a closed subscriber's row is left: %+v", r)
		}
	}
}

// A subscriber with three listeners sends, per interval, one statement
// reading the paused table and one upsert per listener.
func testFleetCost(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 4)
	var handled atomic.Int64
	c := f.subConfig(db)
	c.FleetInterval = fleetInterval
	sub := f.newSubscriber(t, c)
	for _, topic := range []string{"fleet_cost_a", "fleet_cost_b", "fleet_cost_c"} {
		ch, err := sub.Subscribe(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		go func(ch <-chan *message.Message) {
			for m := range ch {
				handled.Add(1)
				m.Ack()
			}
		}(ch)
	}
	db2 := f.pool(t, 1)
	waitFor(t, 10*time.Second, "three rows", func() bool {
		rows, _ := f.listeners(t, db2)
		return len(rows) == 3
	})
	t0 := sub.FleetStats()
	waitFor(t, 10*time.Second, "ten more intervals", func() bool { return sub.FleetStats().Ticks >= t0.Ticks+10 })
	t1 := sub.FleetStats()
	ticks := t1.Ticks - t0.Ticks
	perListener := float64(t1.Upserts-t0.Upserts) / float64(ticks) / 3
	t.Logf("%s: %d intervals, %d statements, %.2f upserts per listener per interval, last interval %d statements",
		h.Dialect.Name(), ticks, t1.Statements-t0.Statements, perListener, t1.LastTick)
	if t1.LastTick != 4 {
		t.Errorf("last interval sent %d statements, want 4 (1 paused read + 3 upserts)", t1.LastTick)
	}
	if perListener != 1 {
		t.Errorf("%.2f upserts per listener per interval, want 1", perListener)
	}
	rows, _ := f.listeners(t, db2)
	for _, r := range rows {
		if r.Status != "accepting" || r.Interval != fleetInterval || r.Host == "" || r.PID == 0 || r.StartedAt.IsZero() {
			t.Errorf("row %+v", r)
		}
	}
}

// A listener whose source's Claim panicked shows faulted in the listeners
// table, with the fault's text and time, while the watchdog has not yet
// rebuilt it. The pipeline runs over transporttest.FaultySource, reported
// by a FleetReporter.
func testFleetFaulted(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 4)
	c := f.subConfig(db)
	c.FleetInterval = fleetInterval
	c.Pipeline.CheckInterval = time.Minute // the fault stays until the test ends
	inj := transporttest.NewFaults().Panic(transporttest.AtReceive, 1)
	rsub, err := receiver.NewSubscriber(func(ctx context.Context, topic string) (transport.Source, error) {
		src, err := sqlqueue.NewSource(ctx, h.Dialect, c, topic, nil)
		if err != nil {
			return nil, err
		}
		return transporttest.FaultySource(src, inj), nil
	}, receiver.SubscriberConfig{Pipeline: c.Pipeline, System: sqlqueue.MessagingSystem(f.h.Dialect)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rsub.Close() })
	rep, err := sqlqueue.NewFleetReporter(h.Dialect, c, sqlqueue.ReceiverMember(rsub), nil)
	if err != nil {
		t.Fatal(err)
	}
	rep.Start()
	t.Cleanup(func() { _ = rep.Close() })
	if _, err := rsub.Subscribe(context.Background(), "fleet_faulted"); err != nil {
		t.Fatal(err)
	}
	var got sqlqueue.ListenerRow
	defer func() {
		if t.Failed() {
			rows, _ := f.listeners(t, db)
			t.Logf("rows %+v; states %+v; injected %d; reporter %+v", rows, rsub.ListenerStates(), inj.Hits(transporttest.AtReceive), rep.Stats())
		}
	}()
	waitFor(t, 20*time.Second, "a faulted row", func() bool {
		rows, _ := f.listeners(t, db)
		for _, r := range rows {
			if r.Faulted {
				got = r
				return true
			}
		}
		return false
	})
	if got.Status != "faulted" || !strings.Contains(got.Fault, "injected") || got.FaultAt.IsZero() || time.Since(got.FaultAt) > time.Minute {
		t.Fatalf("faulted row %+v", got)
	}
	if got.Instance != rep.Stats().Instance || got.Queue != sqlqueue.QueueFor(f.h.Dialect, f.env.Tables, "fleet_faulted", "").Name {
		t.Fatalf("row %+v, reporter %s", got, rep.Stats().Instance)
	}
	// Close deletes the reporter's rows.
	if err := rep.Close(); err != nil {
		t.Fatal(err)
	}
	if rows, _ := f.listeners(t, db); len(rows) != 0 {
		t.Fatalf("rows left after Close: %+v", rows)
	}
}
