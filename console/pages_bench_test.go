package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// Page-load sizes from issue #18's acceptance: 100 queues and 100,000
// dead letters on PostgreSQL.
const (
	benchQueues = 100
	benchDead   = 100_000
)

// bigDeployment seeds a PostgreSQL schema with benchQueues queues (a few
// rows each, and pending more pending messages each) and benchDead dead
// letters spread over them, and returns a console over it. The dead letters go in with one INSERT … SELECT from
// generate_series: seeding is not what is measured. VACUUM then sets the
// visibility map, as autovacuum does for an insert-mostly table, so the
// counts are index-only scans without heap fetches (just after a bulk
// insert, before autovacuum ran, the queue list takes about three times
// as long).
func bigDeployment(tb testing.TB, pending int) (*inspect.SQL, *httptest.Server, []string) {
	tb.Helper()
	src := open(tb, testenv.PostgresSchemaURL(tb))
	qs := make([]inspecttest.Queue, benchQueues)
	for i := range qs {
		qs[i] = inspecttest.Queue{Topic: fmt.Sprintf("topic-%03d", i), Ready: 3, Delayed: 1, InFlight: 1}
	}
	names := inspecttest.Seed(tb, src, qs...)
	ctx := context.Background()
	// One queue name per dead letter, round robin; reasons vary so a
	// reason filter selects about a tenth.
	_, err := src.DB.ExecContext(ctx, `INSERT INTO `+src.Names.Errors+`
		(queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at, failed_at)
		SELECT ($1::text[])[1 + (g % $2)], 'dead-' || g, '{"trace":"t"}', convert_to('{"order":' || g || '}', 'UTF8'),
		       5, CASE WHEN g % 10 = 0 THEN 'handler: card declined' ELSE 'nacked on attempt 5 of 5 (MaxAttempts)' END,
		       g, now() - make_interval(secs => g), now() - make_interval(secs => g)
		FROM generate_series(1, $3) AS g`, names, len(names), benchDead)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := src.DB.ExecContext(ctx, `VACUUM (ANALYZE) `+src.Names.Errors); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < len(qs) && pending > 0; i++ {
		table := sqlqueue.QueueFor(src.Dialect, src.Tables, qs[i].Topic, "").Table
		_, err := src.DB.ExecContext(ctx, `INSERT INTO `+table+` (uuid, headers, body, due_at, created_at)
			SELECT 'msg-' || g, '{"tenant":"t' || (g % 100) || '","trace":"x' || g || '"}', convert_to('{"order":' || g || '}', 'UTF8'),
			       now() - make_interval(secs => $1 - g), now() - make_interval(secs => $1 - g)
			FROM generate_series(1, $1) AS g`, pending)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := src.DB.ExecContext(ctx, `VACUUM (ANALYZE) `+table); err != nil {
			tb.Fatal(err)
		}
	}
	srv, err := console.New(console.Config{Source: src, Kind: src.Kind})
	if err != nil {
		tb.Fatal(err)
	}
	srv.Start()
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
	})
	return src, hs, names
}

func get(tb testing.TB, u string) {
	tb.Helper()
	resp, err := http.Get(u)
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %s", u, resp.Status)
	}
}

// benchPages lists the pages an operator opens, by name.
func benchPages(base string, names []string) []struct{ name, url string } {
	mid := names[len(names)/2]
	return []struct{ name, url string }{
		{"queues", base + "/queues"},
		{"queue", base + "/queues/" + url.PathEscape(mid)},
		{"api-queues", base + "/api/queues"},
		{"deadletters", base + "/deadletters"},
		{"deadletters-queue", base + "/deadletters?queue=" + url.QueryEscape(mid)},
		{"deadletters-reason", base + "/deadletters?reason=" + url.QueryEscape("card declined")},
		{"deadletter", base + "/deadletters/" + strconv.Itoa(benchDead/2)},
	}
}

// BenchmarkPagesPostgres times each console page on 100 queues and
// 100,000 dead letters (issue #18: each under 200 ms). Run:
//
//	source .cache/test.env && go test ./console -run '^$' -bench Pages -benchtime 20x
func BenchmarkPagesPostgres(b *testing.B) {
	_, hs, names := bigDeployment(b, 0)
	benchEach(b, benchPages(hs.URL, names))
}

// BenchmarkPagesAtScalePostgres is BenchmarkPagesPostgres with 100,000
// pending messages in every one of the 100 queues (10 million rows;
// seeding takes minutes), and the message pages of one of them (issue
// 38: every page under 200 ms). Run:
//
//	source .cache/test.env && go test ./console -run '^$' -bench PagesAtScale -benchtime 20x -timeout 60m
func BenchmarkPagesAtScalePostgres(b *testing.B) {
	_, hs, names := bigDeployment(b, benchMessages)
	mid := url.PathEscape(names[len(names)/2])
	pages := append(benchPages(hs.URL, names), []struct{ name, url string }{
		{"messages", hs.URL + "/queues/" + mid + "/messages"},
		{"messages-uuid", hs.URL + "/queues/" + mid + "/messages?uuid=msg-50000"},
		{"messages-meta", hs.URL + "/queues/" + mid + "/messages?key=tenant&value=t42"},
		{"api-messages", hs.URL + "/api/queues/" + mid + "/messages"},
		{"groups", hs.URL + "/groups"},
	}...)
	benchEach(b, pages)
}

// benchEach times each page as a sub-benchmark, in ms per page.
func benchEach(b *testing.B, pages []struct{ name, url string }) {
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			get(b, p.url) // warm the pool and the plans
			b.ResetTimer()
			for b.Loop() {
				get(b, p.url)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
		})
	}
}
