package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// msgQueue seeds one queue (topic "work") and returns its sqlqueue.Queue.
func msgQueue(t *testing.T, s *inspect.SQL, q inspecttest.Queue) sqlqueue.Queue {
	t.Helper()
	q.Topic = "work"
	inspecttest.Seed(t, s, q)
	return sqlqueue.QueueFor(s.Dialect, s.Tables, "work", "")
}

func insert(t *testing.T, s *inspect.SQL, q sqlqueue.Queue, rows ...sqlqueue.InsertRow) {
	t.Helper()
	for _, st := range s.Dialect.Insert(q, rows) {
		r, err := s.DB.QueryContext(context.Background(), st.SQL, st.Args...)
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// stmtIDs runs a dialect statement and returns the first column of its rows.
func stmtIDs(t *testing.T, s *inspect.SQL, st sqlqueue.Stmt) []int64 {
	t.Helper()
	rows, err := s.DB.QueryContext(context.Background(), st.SQL, st.Args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []int64
	for rows.Next() {
		dst := make([]any, len(cols))
		var id int64
		dst[0] = &id
		for i := 1; i < len(cols); i++ {
			dst[i] = new(any)
		}
		if err := rows.Scan(dst...); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func pageAll(t *testing.T, s *inspect.SQL, f inspect.MessageFilter, limit int) (ids []string, pages int) {
	t.Helper()
	cur := ""
	for {
		p, err := s.MessagePage(context.Background(), f, cur, limit)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, m := range p.Messages {
			if f.State != "" && f.State != inspect.StateAll && m.State != f.State {
				t.Errorf("state %s page has %s message %s", f.State, m.State, m.ID)
			}
			ids = append(ids, m.ID)
		}
		if p.Next == "" {
			return ids, pages
		}
		if pages > 1000 {
			t.Fatal("endless pages")
		}
		cur = p.Next
	}
}

func TestMessagePagesByState(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		msgQueue(t, s, inspecttest.Queue{Ready: 7, Delayed: 3, InFlight: 2})
		for _, tc := range []struct {
			st   inspect.MessageState
			want int
		}{{inspect.StatePending, 7}, {inspect.StateDelayed, 3}, {inspect.StateInFlight, 2}, {inspect.StateAll, 12}} {
			ids, pages := pageAll(t, s, inspect.MessageFilter{Queue: "work", State: tc.st}, 2)
			if len(ids) != tc.want {
				t.Errorf("%s: %d messages %v, want %d", tc.st, len(ids), ids, tc.want)
			}
			if want := max(1, (tc.want+1)/2); pages != want {
				t.Errorf("%s: %d pages, want %d", tc.st, pages, want)
			}
			if len(slices.Compact(slices.Clone(ids))) != len(ids) {
				t.Errorf("%s: a message on two pages: %v", tc.st, ids)
			}
		}
		// The queue's table name works as well as its topic.
		name := sqlqueue.QueueFor(s.Dialect, s.Tables, "work", "").Name
		if ids, _ := pageAll(t, s, inspect.MessageFilter{Queue: name, State: inspect.StateAll}, 100); len(ids) != 12 {
			t.Errorf("by table name: %v", ids)
		}
		p, err := s.MessagePage(context.Background(), inspect.MessageFilter{Queue: "work"}, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		m := p.Messages[0]
		if m.State != inspect.StatePending || m.Size != len("ready") || string(m.Preview) != "ready" || m.Version == "" || !m.Cancellable() {
			t.Errorf("first pending message: %+v", m)
		}
		for _, bad := range []struct {
			f   inspect.MessageFilter
			cur string
			is  error
		}{
			{inspect.MessageFilter{Queue: "nope"}, "", transport.ErrQueueNotFound},
			{inspect.MessageFilter{Queue: "work", State: "sideways"}, "", inspect.ErrBadMessageFilter},
			{inspect.MessageFilter{Queue: "work", State: inspect.StatePending}, "17", inspect.ErrBadCursor},
			{inspect.MessageFilter{Queue: "work", State: inspect.StateAll}, "d1.2", inspect.ErrBadCursor},
		} {
			if _, err := s.MessagePage(context.Background(), bad.f, bad.cur, 10); !errors.Is(err, bad.is) {
				t.Errorf("%+v cursor %q: %v, want %v", bad.f, bad.cur, err, bad.is)
			}
		}
	})
}

// rowState is what a consumer's claim owns: browsing must not change it.
func rowStates(t *testing.T, s *inspect.SQL, q sqlqueue.Queue) string {
	t.Helper()
	rows, err := s.DB.QueryContext(context.Background(), `SELECT id, state, owner, attempts, lease_until, due_at FROM `+q.Table+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := ""
	for rows.Next() {
		var id, state, attempts int64
		var owner, lease, due any
		if err := rows.Scan(&id, &state, &owner, &attempts, &lease, &due); err != nil {
			t.Fatal(err)
		}
		out += fmt.Sprintf("%d %d %v %d %v %v\n", id, state, owner, attempts, lease, due)
	}
	return out
}

// Browsing in-flight messages (pages, searches, the detail) takes no lease
// and changes nothing: the rows a consumer claimed are byte for byte what
// they were.
func TestBrowsingTakesNoLease(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		q := msgQueue(t, s, inspecttest.Queue{Ready: 5, Delayed: 1})
		claimed := stmtIDs(t, s, s.Dialect.Claim(q, 42, 2, time.Minute))
		if len(claimed) != 2 {
			t.Fatalf("claimed %v", claimed)
		}
		before := rowStates(t, s, q)
		ctx := context.Background()
		for _, st := range []inspect.MessageState{inspect.StateInFlight, inspect.StateAll, inspect.StatePending} {
			pageAll(t, s, inspect.MessageFilter{Queue: "work", State: st}, 1)
			pageAll(t, s, inspect.MessageFilter{Queue: "work", State: st, UUID: "work-r0"}, 1)
		}
		m, err := s.Message(ctx, "work", strconv.FormatInt(claimed[0], 10))
		if err != nil {
			t.Fatal(err)
		}
		if m.State != inspect.StateInFlight || m.LeaseUntil.IsZero() || m.Cancellable() {
			t.Errorf("claimed message: %+v", m)
		}
		if after := rowStates(t, s, q); after != before {
			t.Fatalf("browsing changed rows:\nbefore\n%s\nafter\n%s", before, after)
		}
		// The claim still settles: its lease is the consumer's.
		if done := stmtIDs(t, s, s.Dialect.Release(q, []sqlqueue.Ref{{ID: claimed[0], Owner: 42}})); len(done) != 1 {
			t.Errorf("release after browsing: %v", done)
		}
	})
}

func TestMessageDetailAndSearch(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		q := msgQueue(t, s, inspecttest.Queue{})
		hostile := `<script>alert("x")</script>`
		insert(t, s, q,
			sqlqueue.InsertRow{UUID: "u-1", Headers: []byte(`{"tenant":"acme","trace":"t1"}`), Body: []byte(`{"a":1}`)},
			sqlqueue.InsertRow{UUID: "u-2", Headers: []byte(`{"tenant":"globex"}`), Body: []byte("two")},
			sqlqueue.InsertRow{UUID: "u-3", Headers: []byte(`{"we\"ird key":"` + `<script>alert(\"x\")</script>` + `"}`), Body: []byte{0, 1, 2}},
			sqlqueue.InsertRow{UUID: "u-1", Headers: []byte(`{"tenant":"acme"}`), Body: []byte("dup uuid"), Delay: time.Hour},
		)
		for _, tc := range []struct {
			f    inspect.MessageFilter
			want []string
		}{
			{inspect.MessageFilter{State: inspect.StateAll, UUID: "u-1"}, []string{"u-1", "u-1"}},
			{inspect.MessageFilter{State: inspect.StatePending, UUID: "u-1"}, []string{"u-1"}},
			{inspect.MessageFilter{State: inspect.StateAll, Key: "tenant", Value: "acme"}, []string{"u-1", "u-1"}},
			{inspect.MessageFilter{State: inspect.StateAll, Key: "trace"}, []string{"u-1"}},
			{inspect.MessageFilter{State: inspect.StateAll, Key: `we"ird key`, Value: hostile}, []string{"u-3"}},
			{inspect.MessageFilter{State: inspect.StateAll, Key: "tenant", Value: "ACME"}, nil},
			{inspect.MessageFilter{State: inspect.StateAll, UUID: "u-9"}, nil},
			{inspect.MessageFilter{State: inspect.StateAll, UUID: "' OR 1=1 --"}, nil},
		} {
			tc.f.Queue = "work"
			p, err := s.MessagePage(context.Background(), tc.f, "", 50)
			if err != nil {
				t.Fatalf("%+v: %v", tc.f, err)
			}
			var got []string
			for _, m := range p.Messages {
				got = append(got, m.UUID)
			}
			if !slices.Equal(got, tc.want) || p.Next != "" || p.Partial {
				t.Errorf("%+v: %v (next %q, partial %v), want %v", tc.f, got, p.Next, p.Partial, tc.want)
			}
		}
		p, err := s.MessagePage(context.Background(), inspect.MessageFilter{Queue: "work", State: inspect.StateAll, Key: `we"ird key`}, "", 50)
		if err != nil || len(p.Messages) != 1 {
			t.Fatalf("%+v %v", p, err)
		}
		m, err := s.Message(context.Background(), "work", p.Messages[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if m.Metadata[`we"ird key`] != hostile || string(m.Payload) != "\x00\x01\x02" || m.UUID != "u-3" {
			t.Errorf("detail: %+v", m)
		}
		if _, err := s.Message(context.Background(), "work", "99999"); !errors.Is(err, inspect.ErrMessageNotFound) {
			t.Errorf("missing message: %v", err)
		}
		if _, err := s.Message(context.Background(), "work", "abc"); !errors.Is(err, inspect.ErrBadMessageFilter) {
			t.Errorf("bad id: %v", err)
		}
	})
}

// A search reads at most the search window per page: with a window of 10
// rows and the only match at the 25th of 30, the first two pages are
// partial and empty, the third has the match and is partial too (its
// window was full: there may be more), and the fourth ends the search.
func TestSearchIsBounded(t *testing.T) {
	defer inspect.SetSearchWindow(10)()
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		q := msgQueue(t, s, inspecttest.Queue{})
		var rows []sqlqueue.InsertRow
		for i := range 30 {
			rows = append(rows, sqlqueue.InsertRow{UUID: "m-" + strconv.Itoa(i), Headers: []byte("{}"), Body: []byte("x")})
		}
		insert(t, s, q, rows...)
		for _, st := range []inspect.MessageState{inspect.StatePending, inspect.StateAll} {
			f := inspect.MessageFilter{Queue: "work", State: st, UUID: "m-24"}
			cur := ""
			var found []string
			var partial []int
			for range 10 {
				p, err := s.MessagePage(context.Background(), f, cur, 5)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range p.Messages {
					found = append(found, m.UUID)
				}
				if p.Partial {
					partial = append(partial, p.Searched)
				}
				if p.Next == "" {
					break
				}
				cur = p.Next
			}
			if !slices.Equal(found, []string{"m-24"}) || !slices.Equal(partial, []int{10, 10, 10}) {
				t.Errorf("%s: found %v, partial pages %v; want [m-24], [10 10 10]", st, found, partial)
			}
		}
	})
}

// A cancel deletes a message only if it is still pending or delayed and
// as the operator saw it: one claimed meanwhile, or retried to a new due
// time, is left and reported changed; one delivered meanwhile is gone.
func TestCancelIsFenced(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		q := msgQueue(t, s, inspecttest.Queue{Ready: 4, Delayed: 1})
		ctx := context.Background()
		p, err := s.MessagePage(ctx, inspect.MessageFilter{Queue: "work", State: inspect.StateAll}, "", 50)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Messages) != 5 {
			t.Fatalf("messages: %+v", p.Messages)
		}
		refs := make([]inspect.MessageRef, len(p.Messages))
		for i, m := range p.Messages {
			refs[i] = inspect.MessageRef{ID: m.ID, Version: m.Version}
		}
		// Claimed: rows 1, 2, 3 (the pending ones, oldest first). Row 1
		// is delivered (gone), row 2 stays in flight, row 3 is retried
		// with a delay (pending again, but rescheduled).
		claimed := stmtIDs(t, s, s.Dialect.Claim(q, 7, 3, time.Minute))
		if len(claimed) != 3 {
			t.Fatalf("claimed %v", claimed)
		}
		refsOf := func(ids ...int64) []sqlqueue.Ref {
			var rs []sqlqueue.Ref
			for _, id := range ids {
				rs = append(rs, sqlqueue.Ref{ID: id, Owner: 7})
			}
			return rs
		}
		stmtIDs(t, s, s.Dialect.Begin(q, refsOf(claimed...), time.Minute))
		stmtIDs(t, s, s.Dialect.Complete(q, refsOf(claimed[0])))
		stmtIDs(t, s, s.Dialect.Retry(q, []sqlqueue.RetryRef{{Ref: sqlqueue.Ref{ID: claimed[2], Owner: 7}, Delay: time.Minute}}))
		res, err := s.CancelMessages(ctx, "work", refs)
		if err != nil {
			t.Fatal(err)
		}
		str := func(ids ...int64) []string {
			var out []string
			for _, id := range ids {
				out = append(out, strconv.FormatInt(id, 10))
			}
			return out
		}
		slices.Sort(res.Changed)
		wantChanged := str(claimed[1], claimed[2])
		slices.Sort(wantChanged)
		if res.Requested != 5 || len(res.Cancelled) != 2 || !slices.Equal(res.Changed, wantChanged) || !slices.Equal(res.Gone, str(claimed[0])) {
			t.Fatalf("cancel: %+v; want 2 cancelled, changed %v, gone %v", res, wantChanged, claimed[0])
		}
		// The in-flight row is untouched and still the consumer's.
		if done := stmtIDs(t, s, s.Dialect.Complete(q, refsOf(claimed[1]))); len(done) != 1 {
			t.Errorf("the consumer lost its message to the cancel: %v", done)
		}
		if _, err := s.CancelMessages(ctx, "work", []inspect.MessageRef{{ID: "1", Version: "bogus"}}); !errors.Is(err, inspect.ErrBadMessageFilter) {
			t.Errorf("bad version: %v", err)
		}
	})
}

// Cancelling all matching: the count comes first, and the cancel takes
// exactly those (messages published after the count and in-flight ones
// stay).
func TestCancelMatchingCountsFirst(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		q := msgQueue(t, s, inspecttest.Queue{Ready: 3, Delayed: 2, InFlight: 1})
		insert(t, s, q,
			sqlqueue.InsertRow{UUID: "a-1", Headers: []byte(`{"tenant":"acme"}`), Body: []byte("x")},
			sqlqueue.InsertRow{UUID: "a-2", Headers: []byte(`{"tenant":"acme"}`), Body: []byte("x"), Delay: time.Hour},
		)
		ctx := context.Background()
		if _, err := s.CountCancellable(ctx, inspect.MessageFilter{Queue: "work", State: inspect.StateInFlight}); !errors.Is(err, inspect.ErrNotCancellable) {
			t.Errorf("count in flight: %v", err)
		}
		acme := inspect.MessageFilter{Queue: "work", State: inspect.StateAll, Key: "tenant", Value: "acme"}
		c, err := s.CountCancellable(ctx, acme)
		if err != nil || c.N != 2 {
			t.Fatalf("count acme: %+v %v", c, err)
		}
		res, err := s.CancelMatching(ctx, acme, c.UpTo)
		if err != nil || res.Requested != 2 || len(res.Cancelled) != 2 {
			t.Fatalf("cancel acme: %+v %v", res, err)
		}
		purge := inspect.MessageFilter{Queue: "work", State: inspect.StateAll}
		c, err = s.CountCancellable(ctx, purge)
		if err != nil || c.N != 5 {
			t.Fatalf("count all: %+v %v", c, err)
		}
		insert(t, s, q, sqlqueue.InsertRow{UUID: "late", Headers: []byte(`{}`), Body: []byte("x")})
		res, err = s.CancelMatching(ctx, purge, c.UpTo)
		if err != nil || res.Requested != 5 || len(res.Cancelled) != 5 {
			t.Fatalf("purge: %+v %v", res, err)
		}
		left, _ := pageAll(t, s, inspect.MessageFilter{Queue: "work", State: inspect.StateAll}, 50)
		if len(left) != 2 {
			t.Errorf("left after the purge: %v, want the in-flight one and the late one", left)
		}
		p, _ := s.MessagePage(ctx, inspect.MessageFilter{Queue: "work", State: inspect.StatePending}, "", 50)
		if len(p.Messages) != 1 || p.Messages[0].UUID != "late" {
			t.Errorf("pending after the purge: %+v", p.Messages)
		}
	})
}

// Claims and a purge racing over the same rows: every row is delivered
// by the claim or cancelled by the purge, never both.
func TestCancelRacesClaims(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		q := msgQueue(t, s, inspecttest.Queue{})
		var rows []sqlqueue.InsertRow
		for i := range 400 {
			rows = append(rows, sqlqueue.InsertRow{UUID: "m-" + strconv.Itoa(i), Headers: []byte("{}"), Body: []byte("x")})
		}
		insert(t, s, q, rows...)
		ctx := context.Background()
		c, err := s.CountCancellable(ctx, inspect.MessageFilter{Queue: "work", State: inspect.StatePending})
		if err != nil || c.N != 400 {
			t.Fatalf("count: %+v %v", c, err)
		}
		var claimed []int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				st := s.Dialect.Claim(q, 9, 5, time.Minute)
				r, err := s.DB.QueryContext(ctx, st.SQL, st.Args...)
				if err != nil {
					t.Error(err)
					return
				}
				for r.Next() {
					var id int64
					var a, b, c, d any
					if err := r.Scan(&id, &a, &b, &c, &d); err != nil {
						t.Error(err)
					}
					claimed = append(claimed, id)
				}
				_ = r.Close()
			}
		}()
		res, err := s.CancelMatching(ctx, inspect.MessageFilter{Queue: "work", State: inspect.StatePending}, c.UpTo)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		cancelled := map[string]bool{}
		for _, id := range res.Cancelled {
			cancelled[id] = true
		}
		for _, id := range claimed {
			if cancelled[strconv.FormatInt(id, 10)] {
				t.Fatalf("message %d both claimed and cancelled", id)
			}
		}
		left, _ := pageAll(t, s, inspect.MessageFilter{Queue: "work", State: inspect.StateAll}, 1000)
		if len(res.Cancelled)+len(left) != 400 {
			t.Errorf("cancelled %d + left %d != 400 (claimed %d, result %d requested, %d changed, %d gone)",
				len(res.Cancelled), len(left), len(claimed), res.Requested, len(res.Changed), len(res.Gone))
		}
		for _, id := range left {
			n, _ := strconv.ParseInt(id, 10, 64)
			if !slices.Contains(claimed, n) {
				t.Errorf("message %s neither claimed nor cancelled", id)
			}
		}
	})
}

func TestCountDead(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		inspecttest.Seed(t, s, inspecttest.Queue{Topic: "orders", Dead: []inspecttest.Dead{{Reason: "card declined"}, {Reason: "boom"}, {Reason: "Card Declined again"}}})
		for _, tc := range []struct {
			f    inspect.Filter
			want int64
		}{{inspect.Filter{}, 3}, {inspect.Filter{Reason: "card declined"}, 2}, {inspect.Filter{Queue: "orders", Reason: "boom"}, 1}} {
			if n, err := s.CountDead(context.Background(), tc.f); err != nil || n != tc.want {
				t.Errorf("%+v: %d %v, want %d", tc.f, n, err, tc.want)
			}
		}
		if _, err := s.CountDead(context.Background(), inspect.Filter{Queue: "nope"}); !errors.Is(err, transport.ErrQueueNotFound) {
			t.Errorf("unknown queue: %v", err)
		}
	})
}
