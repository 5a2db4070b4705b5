package console_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
	"github.com/berth-go/berth/internal/sqlservertest"
	"github.com/berth-go/berth/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The AWS SDK's HTTP transport (the SQS console and subscriber of
		// the health-fleet tests) keeps idle keep-alive connections.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// seeded is a console over a seeded deployment.
type seeded struct {
	src   *inspect.SQL
	srv   *console.Server
	http  *httptest.Server
	queue string // the queue table with dead letters
}

// seedHistory is the first dead letter's metadata: a trace id and the
// four nacked attempts before its last (transport.MetadataAttemptErrors).
const seedHistory = `{"trace":"t1","berth_attempt_errors":"` +
	`attempt 1 at 2026-12-06T09:00:00.125Z: payments: gateway timeout after 10s\n` +
	`attempt 2 at 2026-12-06T09:00:10.480Z: payments: gateway timeout after 10s\n` +
	`attempt 3 at 2026-12-06T09:00:31.002Z\n` +
	`attempt 4 at 2026-12-06T09:01:12.337Z: payments: 503 Service Unavailable\n"}`

func seedQueues() []inspecttest.Queue {
	return []inspecttest.Queue{
		{Topic: "orders", Ready: 4, Delayed: 2, InFlight: 1, Dead: []inspecttest.Dead{
			{Reason: "nacked on attempt 5 of 5 (MaxAttempts)", Body: `{"order":1,"sku":"A-1"}`, Metadata: seedHistory, Attempts: 5, Age: 3 * time.Hour},
			{Reason: "handler: card declined", Body: `{"order":2}`, Attempts: 5, Age: 2 * time.Hour},
			{Reason: "handler: card declined", Body: "\x00\x01binary", Attempts: 5, Age: time.Hour},
			{Reason: "poison message", Body: "plain text body", Attempts: 1, Age: 10 * time.Minute},
		}},
		{Topic: "emails", Ready: 1},
	}
}

// open opens the seeded deployment of rawURL.
func open(t testing.TB, rawURL string) *inspect.SQL {
	t.Helper()
	s, err := inspect.OpenSQL(context.Background(), rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func sqliteURL(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "q.db") }

func startConsole(t *testing.T, rawURL string, cfg console.Config) *seeded {
	t.Helper()
	src := open(t, rawURL)
	names := inspecttest.Seed(t, src, seedQueues()...)
	cfg.Source, cfg.Kind = src, src.Kind
	srv, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &seeded{src: src, srv: srv, http: serve(t, srv, srv.Handler()), queue: names[0]}
}

// serve starts srv and an httptest server of h (srv's handler, or a mux
// mounting it), both closed at cleanup.
func serve(t *testing.T, srv *console.Server, h http.Handler) *httptest.Server {
	t.Helper()
	srv.Start()
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return hs
}

func do(t *testing.T, method, u, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// sqlURLs runs fn against a fresh SQLite file, a fresh PostgreSQL schema
// and, when BERTH_TEST_SQLSERVER_URL is set, a fresh SQL Server schema
// (dropped at cleanup): the console's statements go through each dialect.
func sqlURLs(t *testing.T, fn func(t *testing.T, rawURL string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, sqliteURL(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, testenv.PostgresSchemaURL(t)) })
	t.Run("sqlserver", func(t *testing.T) {
		base := testenv.SQLServerURL(t)
		schema := testenv.UniqueName("berth")
		db, err := sql.Open("sqlserver", base)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := sqlservertest.DropSchema(ctx, db, schema); err != nil {
				t.Error(err)
			}
			_ = db.Close()
		})
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("schema", schema)
		u.RawQuery = q.Encode()
		fn(t, u.String())
	})
}

func TestAPI(t *testing.T) { sqlURLs(t, testAPI) }

func testAPI(t *testing.T, rawURL string) {
	c := startConsole(t, rawURL, console.Config{})
	base := c.http.URL

	code, body := do(t, "GET", base+"/api/queues?sort=ready&desc=1", "")
	var qs struct {
		Queues []struct {
			Name                                   string
			Ready, Delayed, InFlight, DeadLettered int64
		}
	}
	if err := json.Unmarshal([]byte(strings.NewReplacer("in_flight", "InFlight", "dead_lettered", "DeadLettered").Replace(body)), &qs); code != 200 || err != nil {
		t.Fatalf("/api/queues: %d %v\n%s", code, err, body)
	}
	if len(qs.Queues) != 2 || qs.Queues[0].Name != c.queue || qs.Queues[0].Ready != 4 || qs.Queues[0].Delayed != 2 || qs.Queues[0].InFlight != 1 || qs.Queues[0].DeadLettered != 4 {
		t.Fatalf("/api/queues: %+v", qs)
	}

	code, body = do(t, "GET", base+"/api/deadletters?queue=orders&reason=DECLINED&limit=1", "")
	var page struct {
		DeadLetters []struct{ ID, Reason string } `json:"dead_letters"`
		Next        string
	}
	if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil || len(page.DeadLetters) != 1 || page.Next == "" {
		t.Fatalf("first page: %d %v %s", code, err, body)
	}
	code, body = do(t, "GET", base+"/api/deadletters?queue=orders&reason=DECLINED&limit=1&cursor="+page.Next, "")
	first := page.DeadLetters[0].ID
	page.DeadLetters, page.Next = nil, ""
	if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil || len(page.DeadLetters) != 1 || page.DeadLetters[0].ID == first {
		t.Fatalf("second page: %d %v %s", code, err, body)
	}

	code, body = do(t, "GET", base+"/api/deadletters/"+first+"?view=hex", "")
	if code != 200 || !strings.Contains(body, `"body_encoding": "hex"`) {
		t.Fatalf("detail as hex: %d %s", code, body)
	}

	// Replay one by id twice: the second moves nothing and says so.
	code, body = do(t, "POST", base+"/api/deadletters/replay", `{"ids":["`+first+`"],"delay":"1h"}`, "Content-Type", "application/json")
	if code != 200 || !strings.Contains(body, `"done": 1`) {
		t.Fatalf("replay: %d %s", code, body)
	}
	code, body = do(t, "POST", base+"/api/deadletters/replay", `{"ids":["`+first+`"]}`)
	if code != 200 || !strings.Contains(body, `"done": 0`) || !strings.Contains(body, `"requested": 1`) {
		t.Fatalf("replay again: %d %s", code, body)
	}
	stats, _ := c.src.Queues(context.Background())
	if stats[1].Delayed != 3 || stats[1].DeadLettered != 3 {
		t.Fatalf("after the delayed replay: %+v", stats[1])
	}
	// Delete all matching a reason.
	code, body = do(t, "POST", base+"/api/deadletters/delete", `{"all":true,"filter":{"reason":"poison"}}`)
	if code != 200 || !strings.Contains(body, `"done": 1`) || !strings.Contains(body, `"requested": -1`) {
		t.Fatalf("delete all matching: %d %s", code, body)
	}
}

func TestBadInput(t *testing.T) { sqlURLs(t, testBadInput) }

func testBadInput(t *testing.T, rawURL string) {
	c := startConsole(t, rawURL, console.Config{})
	base := c.http.URL
	for _, tc := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"GET", "/api/deadletters?queue=nosuch", "", 404, `"nosuch" is no queue table or topic here`},
		{"GET", "/queues/nosuch", "", 404, "not a queue here"},
		{"GET", "/api/deadletters?since=yesterday", "", 400, `since="yesterday" is not a time`},
		{"GET", "/api/deadletters?older_than=-1h", "", 400, "older_than"},
		{"GET", "/api/deadletters?since=2026-03-02&until=2026-03-01", "", 400, "since must be before until"},
		{"GET", "/api/deadletters?cursor=abc", "", 400, "bad page cursor"},
		{"GET", "/api/deadletters?limit=0", "", 400, "limit"},
		{"GET", "/api/queues?sort=size", "", 400, `sort="size"`},
		{"GET", "/api/deadletters/999999", "", 404, "no dead letter with id"},
		{"GET", "/deadletters/1?view=xml", "", 400, "view="},
		{"POST", "/api/deadletters/replay", `{"ids":[]}`, 400, "nothing selected"},
		{"POST", "/api/deadletters/replay", `{"ids":["1"],"all":true}`, 400, "not both"},
		{"POST", "/api/deadletters/replay", `{"ids":["1"],"delay":"soon"}`, 400, "delay"},
		{"POST", "/api/deadletters/replay", `{"idz":["1"]}`, 400, "unknown field"},
		{"POST", "/api/deadletters/replay", `{"all":true,"filter":{"queue":"nosuch"}}`, 404, "nosuch"},
		{"POST", "/api/deadletters/move", `{"ids":["1"]}`, 404, "no action"},
		{"POST", "/deadletters/replay", "confirm=yes", 400, "nothing selected"},
	} {
		code, body := do(t, tc.method, base+tc.path, tc.body, "Content-Type", "application/x-www-form-urlencoded")
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s %s: %d %q, want %d containing %q", tc.method, tc.path, tc.body, code, body, tc.code, tc.want)
		}
	}
	// Nothing moved.
	stats, _ := c.src.Queues(context.Background())
	if stats[1].DeadLettered != 4 || stats[1].Ready != 4 {
		t.Fatalf("bad input changed something: %+v", stats[1])
	}
}

func TestFormActionConfirms(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{})
	form := url.Values{"id": {"1", "2"}}
	code, body := do(t, "POST", c.http.URL+"/deadletters/replay", form.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	if code != 200 || !strings.Contains(body, "2 selected dead letter(s)") {
		t.Fatalf("confirmation page: %d %s", code, body)
	}
	if stats, _ := c.src.Queues(context.Background()); stats[1].DeadLettered != 4 {
		t.Fatalf("acted before confirmation: %+v", stats[1])
	}
	form.Set("confirm", "yes")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.PostForm(c.http.URL+"/deadletters/replay", form)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if loc := res.Header.Get("Location"); res.StatusCode != 303 || !strings.Contains(loc, "done=replayed&n=2&of=2") {
		t.Fatalf("after the action: %d %s", res.StatusCode, loc)
	}
	// A cross-site form post is refused.
	code, body = do(t, "POST", c.http.URL+"/deadletters/delete", "id=3&confirm=yes", "Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site")
	if code != 403 || !strings.Contains(body, "cross-site") {
		t.Fatalf("cross-site post: %d %s", code, body)
	}
	code, _ = do(t, "POST", c.http.URL+"/deadletters/delete", "id=3&confirm=yes", "Content-Type", "application/x-www-form-urlencoded", "Origin", "https://evil.example")
	if code != 403 {
		t.Fatalf("post from another origin: %d", code)
	}
}

func TestReadOnly(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{ReadOnly: true})
	code, body := do(t, "POST", c.http.URL+"/api/deadletters/delete", `{"all":true}`)
	if code != 403 || !strings.Contains(body, "read-only") {
		t.Fatalf("read-only delete: %d %s", code, body)
	}
	code, body = do(t, "GET", c.http.URL+"/deadletters", "")
	if code != 200 || strings.Contains(body, "formaction") || strings.Contains(body, `type="checkbox"`) {
		t.Fatalf("read-only page shows actions: %d", code)
	}
}

func TestAuth(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{Auth: console.Auth{Token: "s3cret", User: "ops", Password: "pw"}})
	for _, tc := range []struct {
		hdr  []string
		code int
	}{
		{nil, 401},
		{[]string{"Authorization", "Bearer nope"}, 401},
		{[]string{"Authorization", "Bearer s3cret"}, 200},
		{[]string{"Authorization", "Basic b3BzOnB3"}, 200}, // ops:pw
		{[]string{"Authorization", "Basic b3BzOnB4"}, 401}, // ops:px
	} {
		if code, body := do(t, "GET", c.http.URL+"/api/queues", "", tc.hdr...); code != tc.code {
			t.Errorf("%v: %d %s, want %d", tc.hdr, code, body, tc.code)
		}
	}
	if code, _ := do(t, "GET", c.http.URL+"/static/console.css", ""); code != 401 {
		t.Errorf("assets without credentials: %d", code)
	}
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr string
		auth console.Auth
		ok   bool
	}{
		{"127.0.0.1:8080", console.Auth{}, true},
		{"[::1]:8080", console.Auth{}, true},
		{"localhost:8080", console.Auth{}, true},
		{"0.0.0.0:8080", console.Auth{}, false},
		{":8080", console.Auth{}, false},
		{"10.1.2.3:8080", console.Auth{}, false},
		{":8080", console.Auth{Token: "x"}, true},
	} {
		err := console.CheckListen(tc.addr, tc.auth)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, console.ErrInsecureAddr)) {
			t.Errorf("CheckListen(%q, %+v) = %v", tc.addr, tc.auth, err)
		}
	}
}

func TestNewValidates(t *testing.T) {
	_, err := console.New(console.Config{Auth: console.Auth{User: "u"}, PageSize: 5000})
	if !errors.Is(err, console.ErrInvalidConfig) {
		t.Fatalf("New: %v", err)
	}
	for _, want := range []string{"Source", "PageSize", "User and Password"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's error %q does not name %s", err, want)
		}
	}
}

func TestPostgresQueueCounts(t *testing.T) {
	c := startConsole(t, testenv.PostgresSchemaURL(t), console.Config{})
	code, body := do(t, "GET", c.http.URL+"/api/queues/orders", "")
	if code != 200 || !strings.Contains(body, `"ready": 4`) || !strings.Contains(body, `"dead_lettered": 4`) {
		t.Fatalf("/api/queues/orders: %d %s", code, body)
	}
}
