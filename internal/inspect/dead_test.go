package inspect_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
)

// eachSQL runs fn against a fresh SQLite file and a fresh PostgreSQL
// schema.
func eachSQL(t *testing.T, fn func(t *testing.T, s *inspect.SQL)) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := inspect.OpenSQL(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "q.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		fn(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		s, err := inspect.OpenSQL(context.Background(), testenv.PostgresSchemaURL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		fn(t, s)
	})
}

func TestQueuesCountsByState(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		inspecttest.Seed(t, s, inspecttest.Queue{Topic: "orders", Ready: 3, Delayed: 2, InFlight: 1, Dead: []inspecttest.Dead{{Reason: "boom"}}})
		qs, err := s.Queues(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 1 {
			t.Fatalf("queues: %+v", qs)
		}
		q := qs[0]
		if q.Topic != "orders" || q.Ready != 3 || q.Delayed != 2 || q.InFlight != 1 || q.DeadLettered != 1 {
			t.Fatalf("counts: %+v", q)
		}
		if q.OldestReady < 0 || q.OldestReady > time.Hour {
			t.Fatalf("oldest ready: %v", q.OldestReady)
		}
	})
}

// QueuesUpTo and GroupsUpTo stop each state's count at their cap and say
// so; a count under the cap is exact and unflagged.
func TestQueuesUpToCaps(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		inspecttest.Seed(t, s, inspecttest.Queue{Topic: "orders", Ready: 5, Delayed: 3, InFlight: 1})
		qs, err := s.QueuesUpTo(context.Background(), 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 1 {
			t.Fatalf("queues: %+v", qs)
		}
		q := qs[0]
		if q.Ready != 3 || !q.ReadyMore || q.Delayed != 3 || q.DelayedMore || q.InFlight != 1 || q.InFlightMore {
			t.Fatalf("counts up to 3: %+v", q)
		}
		exact, err := s.Queues(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if q := exact[0]; q.Ready != 5 || q.ReadyMore || q.Delayed != 3 || q.DelayedMore {
			t.Fatalf("exact counts: %+v", q)
		}
		gl, err := s.GroupsUpTo(context.Background(), "", 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(gl.Groups) != 1 {
			t.Fatalf("groups: %+v", gl.Groups)
		}
		if g := gl.Groups[0]; g.Ready != 3 || !g.ReadyMore || g.Delayed != 3 || g.DelayedMore || g.InFlight != 1 || g.InFlightMore {
			t.Fatalf("group counts up to 3: %+v", g)
		}
		gl, err = s.Groups(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		if g := gl.Groups[0]; g.Ready != 5 || g.ReadyMore {
			t.Fatalf("exact group counts: %+v", g)
		}
	})
}

func TestDeadLetterPageKeyset(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		dead := make([]inspecttest.Dead, 7)
		for i := range dead {
			dead[i] = inspecttest.Dead{Reason: "handler failed", Body: "x", Age: time.Duration(10-i) * time.Minute}
		}
		dead[3].Reason = "Timeout 50%_done"
		inspecttest.Seed(t, s, inspecttest.Queue{Topic: "a", Dead: dead}, inspecttest.Queue{Topic: "b", Dead: dead[:2]})
		ctx := context.Background()
		var all []string
		cursor := ""
		for pages := 0; ; pages++ {
			p, err := s.DeadLetterPage(ctx, inspect.Filter{Queue: "a"}, cursor, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range p.DeadLetters {
				all = append(all, d.ID)
			}
			if p.Next == "" {
				break
			}
			cursor = p.Next
			if pages > 5 {
				t.Fatal("paging does not end")
			}
		}
		if len(all) != 7 {
			t.Fatalf("paged %d of queue a's 7 dead letters: %v", len(all), all)
		}
		// Reason matching is a substring, case-insensitive, wildcards literal.
		p, err := s.DeadLetterPage(ctx, inspect.Filter{Reason: "timeout 50%_"}, "", 10)
		if err != nil || len(p.DeadLetters) != 1 || p.DeadLetters[0].Reason != "Timeout 50%_done" {
			t.Fatalf("reason filter: %+v %v", p, err)
		}
		p, err = s.DeadLetterPage(ctx, inspect.Filter{Reason: "%"}, "", 10)
		if err != nil || len(p.DeadLetters) != 1 {
			t.Fatalf("%% is literal: %d rows, %v", len(p.DeadLetters), err)
		}
		// A time range: failed between 8.5 and 5.5 minutes ago.
		now := time.Now()
		p, err = s.DeadLetterPage(ctx, inspect.Filter{Queue: "a", Since: now.Add(-510 * time.Second), Until: now.Add(-330 * time.Second)}, "", 10)
		if err != nil || len(p.DeadLetters) != 3 {
			t.Fatalf("time range: %d rows, %v", len(p.DeadLetters), err)
		}
		if _, err := s.DeadLetterPage(ctx, inspect.Filter{}, "x", 10); !errors.Is(err, inspect.ErrBadCursor) {
			t.Fatalf("bad cursor: %v", err)
		}
		if _, err := s.DeadLetterPage(ctx, inspect.Filter{Queue: "nosuch"}, "", 10); !errors.Is(err, transport.ErrQueueNotFound) {
			t.Fatalf("unknown queue: %v", err)
		}
	})
}

// Two replays and a purge of the same dead letters at once: each dead
// letter is moved or deleted exactly once.
func TestReplayIsFenced(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		dead := make([]inspecttest.Dead, 300)
		for i := range dead {
			dead[i] = inspecttest.Dead{Reason: "boom", Body: "b"}
		}
		inspecttest.Seed(t, s, inspecttest.Queue{Topic: "orders", Dead: dead})
		ctx := context.Background()
		var mu sync.Mutex
		moved := map[string]int{}
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				var ds []inspect.DeadLetter
				var err error
				if i == 2 {
					ds, err = s.Purge(ctx, inspect.Filter{}, false)
				} else {
					ds, err = s.Replay(ctx, inspect.Filter{}, false)
				}
				if err != nil && !strings.Contains(err.Error(), "database is locked") {
					t.Error(err)
				}
				mu.Lock()
				defer mu.Unlock()
				for _, d := range ds {
					moved[d.ID]++
				}
			})
		}
		wg.Wait()
		qs, err := s.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		left, _ := s.DeadLetters(ctx, inspect.Filter{}, 0)
		purged := 0
		for id, n := range moved {
			if n != 1 {
				t.Errorf("dead letter %s settled %d times", id, n)
			}
			purged++
		}
		purged -= int(qs[0].Ready)
		if int(qs[0].Ready)+purged+len(left) != 300 {
			t.Fatalf("ready %d + purged %d + left %d != 300", qs[0].Ready, purged, len(left))
		}
	})
}

func TestReplayDelayed(t *testing.T) {
	eachSQL(t, func(t *testing.T, s *inspect.SQL) {
		inspecttest.Seed(t, s, inspecttest.Queue{Topic: "orders", Dead: []inspecttest.Dead{{Reason: "a"}, {Reason: "b"}}})
		ctx := context.Background()
		ds, err := s.ReplayDelayed(ctx, inspect.Filter{Reason: "a"}, time.Hour)
		if err != nil || len(ds) != 1 {
			t.Fatalf("replay: %v %v", ds, err)
		}
		qs, _ := s.Queues(ctx)
		if qs[0].Delayed != 1 || qs[0].Ready != 0 || qs[0].DeadLettered != 1 {
			t.Fatalf("after a delayed replay: %+v", qs[0])
		}
		// Replaying the same selection again moves nothing.
		ds, err = s.ReplayDelayed(ctx, inspect.Filter{IDs: []string{ds[0].ID}}, 0)
		if err != nil || len(ds) != 0 {
			t.Fatalf("second replay: %v %v", ds, err)
		}
	})
}
