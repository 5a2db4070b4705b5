package inspect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
	"github.com/berth-go/berth/internal/testenv"
)

// seedDead puts n dead letters spread over queues into s's error table in
// one statement; every tenth has the reason "handler: card declined".
func seedDead(t *testing.T, s *inspect.SQL, queues []string, n int) {
	t.Helper()
	_, err := s.DB.ExecContext(context.Background(), `INSERT INTO `+s.Names.Errors+`
		(queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at, failed_at)
		SELECT ($1::text[])[1 + (g % $2)], 'dead-' || g, '{}', convert_to('{"n":' || g || '}', 'UTF8'), 5,
		       CASE WHEN g % 10 = 0 THEN 'handler: card declined' ELSE 'nacked on attempt 5 of 5 (MaxAttempts)' END,
		       g, now() - make_interval(secs => g), now() - make_interval(secs => g)
		FROM generate_series(1, $3) AS g`, queues, len(queues), n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.ExecContext(context.Background(), `ANALYZE `+s.Names.Errors); err != nil {
		t.Fatal(err)
	}
}

// seqScans returns the relations the plan of query reads by sequential
// scan.
func seqScans(t *testing.T, s *inspect.SQL, query string, args ...any) []string {
	t.Helper()
	var doc string
	if err := s.DB.QueryRowContext(context.Background(), `EXPLAIN (FORMAT JSON) `+query, args...).Scan(&doc); err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	var plans []struct{ Plan json.RawMessage }
	if err := json.Unmarshal([]byte(doc), &plans); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if n["Node Type"] == "Seq Scan" {
			out = append(out, fmt.Sprint(n["Relation Name"]))
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
	}
	for _, p := range plans {
		var root map[string]any
		_ = json.Unmarshal(p.Plan, &root)
		walk(root)
	}
	return out
}

// TestConsoleQueriesSeek checks on PostgreSQL that what the console runs
// for its pages — the per-queue dead-letter counts and a dead-letter page,
// first or deep, by queue or by reason — reads indexes, never the whole
// error table (issue #18: pages under 200 ms with 100,000 dead letters;
// BenchmarkPagesPostgres in console times them).
func TestConsoleQueriesSeek(t *testing.T) {
	s, err := inspect.OpenSQL(context.Background(), testenv.PostgresSchemaURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	qs := make([]inspecttest.Queue, 20)
	for i := range qs {
		qs[i] = inspecttest.Queue{Topic: fmt.Sprintf("t%02d", i)}
	}
	names := inspecttest.Seed(t, s, qs...)
	seedDead(t, s, names, 20_000)
	ctx := context.Background()
	if got := seqScans(t, s, s.DeadCountsQuery()); len(got) > 0 {
		t.Errorf("dead-letter counts scan %v", got)
	}
	for _, c := range []struct {
		name  string
		f     inspect.Filter
		after int64
	}{
		{"first page", inspect.Filter{}, 0},
		{"deep page", inspect.Filter{}, 15_000},
		{"by queue", inspect.Filter{Queue: names[7]}, 0},
		{"by reason", inspect.Filter{Reason: "Card Declined"}, 0},
	} {
		query, args, err := s.PageQuery(ctx, c.f, c.after, 51)
		if err != nil {
			t.Fatal(err)
		}
		if got := seqScans(t, s, query, args...); len(got) > 0 {
			t.Errorf("%s: scans %v\n%s", c.name, got, query)
		}
	}
}

// TestDeadCountsCap checks that a queue's dead letters are counted up to
// DeadCountCap and flagged beyond, while the others stay exact.
func TestDeadCountsCap(t *testing.T) {
	s, err := inspect.OpenSQL(context.Background(), testenv.PostgresSchemaURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	names := inspecttest.Seed(t, s, inspecttest.Queue{Topic: "big"}, inspecttest.Queue{Topic: "small"})
	seedDead(t, s, names[:1], inspect.DeadCountCap+5)
	seedDead(t, s, names[1:], 3)
	stats, err := s.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]inspect.QueueStats{}
	for _, q := range stats {
		got[q.Queue] = q
	}
	if b := got[names[0]]; b.DeadLettered != inspect.DeadCountCap || !b.DeadLetteredMore {
		t.Errorf("big queue: %d dead, more=%v; want %d and more", b.DeadLettered, b.DeadLetteredMore, inspect.DeadCountCap)
	}
	if sm := got[names[1]]; sm.DeadLettered != 3 || sm.DeadLetteredMore {
		t.Errorf("small queue: %d dead, more=%v; want 3 exactly", sm.DeadLettered, sm.DeadLetteredMore)
	}
	one, err := s.Queue(context.Background(), "big")
	if err != nil || one.Queue != names[0] || one.DeadLettered != inspect.DeadCountCap || !one.DeadLetteredMore {
		t.Errorf("Queue(big) = %+v, %v", one, err)
	}
	if _, err := s.Queue(context.Background(), "nope"); err == nil || !strings.Contains(err.Error(), "not a queue") {
		t.Errorf("Queue(nope) = %v, want not found", err)
	}
}
