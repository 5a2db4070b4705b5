package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// benchMessages is the pending backlog of the message-browsing benchmark
// (issue 38: 100,000 pending rows in a queue).
const benchMessages = 100_000

// bigQueue seeds a PostgreSQL schema with one queue of benchMessages
// pending messages (due one second apart, metadata tenant t0…t99), 1,000
// delayed and 20 in flight, then VACUUM (ANALYZE), and returns a console
// over it, the queue's name and the cursor of a page in the middle.
func bigQueue(tb testing.TB) (*httptest.Server, string, string) {
	tb.Helper()
	src := open(tb, testenv.PostgresSchemaURL(tb))
	names := inspecttest.Seed(tb, src, inspecttest.Queue{Topic: "big", InFlight: 20})
	name := names[0]
	table := sqlqueue.QueueFor(src.Dialect, src.Tables, "big", "").Table
	ctx := context.Background()
	_, err := src.DB.ExecContext(ctx, `INSERT INTO `+table+` (uuid, headers, body, due_at, created_at)
		SELECT 'msg-' || g, '{"tenant":"t' || (g % 100) || '","trace":"x' || g || '"}', convert_to('{"order":' || g || '}', 'UTF8'),
		       now() - make_interval(secs => $1 - g), now() - make_interval(secs => $1 - g)
		FROM generate_series(1, $1) AS g`, benchMessages)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := src.DB.ExecContext(ctx, `INSERT INTO `+table+` (uuid, headers, body, due_at)
		SELECT 'later-' || g, '{}', '\x00'::bytea, now() + make_interval(secs => g) FROM generate_series(1, 1000) AS g`); err != nil {
		tb.Fatal(err)
	}
	if _, err := src.DB.ExecContext(ctx, `VACUUM (ANALYZE) `+table); err != nil {
		tb.Fatal(err)
	}
	var due time.Time
	var id int64
	if err := src.DB.QueryRowContext(ctx, `SELECT due_at, id FROM `+table+` WHERE uuid = $1`, "msg-"+strconv.Itoa(benchMessages/2)).Scan(&due, &id); err != nil {
		tb.Fatal(err)
	}
	srv, err := console.New(console.Config{Source: src, Kind: src.Kind})
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
	})
	return hs, name, "d" + strconv.FormatInt(due.UnixMicro(), 10) + "." + strconv.FormatInt(id, 10)
}

func post(tb testing.TB, u, body string) {
	tb.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("POST %s: %s", u, resp.Status)
	}
}

// BenchmarkMessagesPostgres times the message pages on a queue of 100,000
// pending messages: each is a keyset page or a bounded search. Run:
//
//	source .cache/test.env && cd console && go test -run '^$' -bench Messages -benchtime 20x -count 3 .
func BenchmarkMessagesPostgres(b *testing.B) {
	hs, name, mid := bigQueue(b)
	base := hs.URL + "/queues/" + url.PathEscape(name) + "/messages"
	pages := []struct{ name, url string }{
		{"pending-first", base},
		{"pending-middle", base + "?cursor=" + url.QueryEscape(mid)},
		{"delayed", base + "?state=delayed"},
		{"in-flight", base + "?state=in_flight"},
		{"all-first", base + "?state=all"},
		{"uuid-hit", base + "?state=all&uuid=msg-5000"},
		{"uuid-miss-window", base + "?state=pending&uuid=nope"},
		{"meta-window", base + "?state=pending&key=tenant&value=t7"},
		{"detail", base + "/" + strconv.Itoa(benchMessages/2)},
		{"api-pending", hs.URL + "/api/queues/" + url.PathEscape(name) + "/messages"},
	}
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
	// The count before a purge (what the confirmation shows).
	api := hs.URL + "/api/queues/" + url.PathEscape(name) + "/messages/cancel"
	for _, c := range []struct{ name, body string }{
		{"count-purge", `{"all":true,"filter":{"state":"all"},"dry_run":true}`},
		{"count-meta", `{"all":true,"filter":{"state":"pending","key":"tenant","value":"t7"},"dry_run":true}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			post(b, api, c.body)
			b.ResetTimer()
			for b.Loop() {
				post(b, api, c.body)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
		})
	}
}
