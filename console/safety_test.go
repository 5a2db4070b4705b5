package console_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/postgres"
)

// doHost is do with the request's Host set to host.
func doHost(t *testing.T, method, u, host, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
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

// Without credentials, a request whose Host is not a loopback address or
// localhost (a page of a domain rebound to 127.0.0.1) is refused on every
// path, the API, the assets and the actions included; with credentials
// the Host is not checked.
func TestHostCheckedWithoutCredentials(t *testing.T) {
	c := startConsole(t, testenv.PostgresSchemaURL(t), console.Config{})
	port := c.http.URL[strings.LastIndex(c.http.URL, ":")+1:]
	for _, host := range []string{"evil.test:" + port, "evil.test", "127.0.0.1.evil.test:" + port, "localhost.evil.test:" + port, "LOCALHOST.:" + port, "10.0.0.1:" + port} {
		for _, tc := range []struct{ method, path, body string }{
			{"GET", "/queues", ""},
			{"GET", "/api/deadletters", ""},
			{"GET", "/api/deadletters/1", ""},
			{"GET", "/static/console.js", ""},
			{"POST", "/api/queues/" + c.queue + "/pause", `{"by":"rebinding"}`},
			{"POST", "/queues/" + c.queue + "/pause", "confirm=yes"},
			{"POST", "/api/deadletters/delete", `{"all":true}`},
			{"GET", "/groups", ""},
			{"GET", "/api/groups", ""},
			{"POST", "/api/groups/retire", `{"topic":"emails","group":"","force":true}`},
			{"POST", "/groups/retire", "topic=orders&group=audit&confirm=yes&force=1"},
		} {
			code, body := doHost(t, tc.method, c.http.URL+tc.path, host, tc.body,
				"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://"+host)
			if code != http.StatusMisdirectedRequest || !strings.Contains(body, "421 misdirected request") || strings.Contains(body, c.queue) {
				t.Errorf("Host %s: %s %s: %d %q, want 421", host, tc.method, tc.path, code, body)
			}
		}
	}
	if ps, err := c.src.Paused(context.Background()); err != nil || len(ps) != 0 {
		t.Fatalf("paused by a refused request: %+v %v", ps, err)
	}
	if ds, err := c.src.DeadLetters(context.Background(), inspect.Filter{}, 0); err != nil || len(ds) != 4 {
		t.Fatalf("dead letters after refused requests: %d %v", len(ds), err)
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LocalHost:" + port, "[::1]:" + port, "127.0.0.2:" + port, "localhost"} {
		if code, body := doHost(t, "GET", c.http.URL+"/api/queues", host, ""); code != 200 {
			t.Errorf("Host %s: %d %s", host, code, body)
		}
	}
	auth := startConsole(t, sqliteURL(t), console.Config{Auth: console.Auth{Token: "s3cret"}})
	if code, body := doHost(t, "GET", auth.http.URL+"/api/queues", "console.example.com", "", "Authorization", "Bearer s3cret"); code != 200 {
		t.Errorf("with credentials, another Host: %d %s", code, body)
	}
}

// The scheme of the Authorization header is case-insensitive (RFC 7235).
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{Auth: console.Auth{Token: "s3cret"}})
	for _, h := range []string{"bearer s3cret", "BEARER s3cret", "Bearer  s3cret"} {
		if code, body := do(t, "GET", c.http.URL+"/api/queues", "", "Authorization", h); code != 200 {
			t.Errorf("%q: %d %s", h, code, body)
		}
	}
	for _, h := range []string{"bearer nope", "bearers3cret", "Token s3cret"} {
		if code, _ := do(t, "GET", c.http.URL+"/api/queues", "", "Authorization", h); code != 401 {
			t.Errorf("%q: %d, want 401", h, code)
		}
	}
}

// A POST whose Origin has the console's host but another scheme is
// another origin.
func TestOriginSchemeChecked(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{})
	host := strings.TrimPrefix(c.http.URL, "http://")
	form := "id=3" // no confirm: the confirmation page, nothing changes
	hdr := []string{"Content-Type", "application/x-www-form-urlencoded"}
	if code, body := do(t, "POST", c.http.URL+"/deadletters/delete", form, append(hdr, "Origin", "http://"+host)...); code != 200 {
		t.Errorf("same origin: %d %s", code, body)
	}
	for _, o := range []string{"https://" + host, "null", "http://" + host + ".evil.test", "ws://" + host} {
		if code, body := do(t, "POST", c.http.URL+"/deadletters/delete", form, append(hdr, "Origin", o)...); code != 403 || !strings.Contains(body, "cross-site") {
			t.Errorf("Origin %s: %d %s, want 403", o, code, body)
		}
	}
	// Behind a TLS proxy that says so, https is the console's scheme.
	if code, body := do(t, "POST", c.http.URL+"/deadletters/delete", form, append(hdr, "Origin", "https://"+host, "X-Forwarded-Proto", "https")...); code != 200 {
		t.Errorf("https origin behind a TLS proxy: %d %s", code, body)
	}
}

// logBuffer is a Logger's output, safe to read while the console writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// checkCannotSee checks that a console whose database does not answer
// says so (503, a generic message without the driver's text) on every
// dead-letter read and action, never "nothing there", and that its log
// has the detail.
func checkCannotSee(t *testing.T, base, queue string, log *logBuffer, secrets ...string) {
	t.Helper()
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/api/deadletters", ""},
		{"GET", "/api/deadletters?queue=" + queue, ""},
		{"GET", "/api/deadletters/1", ""},
		{"GET", "/api/queues", ""},
		{"GET", "/api/queues/" + queue, ""},
		{"POST", "/api/deadletters/replay", `{"ids":["1"]}`},
		{"POST", "/api/deadletters/replay", `{"all":true}`},
		{"POST", "/api/deadletters/delete", `{"all":true,"filter":{"reason":"declined"}}`},
		{"POST", "/api/deadletters/delete", `{"ids":["1","2"]}`},
		{"GET", "/deadletters", ""},
		{"GET", "/deadletters/1", ""},
		{"GET", "/queues", ""},
		{"POST", "/deadletters/replay", "all=1&confirm=yes"},
		{"GET", "/api/groups", ""},
		{"GET", "/api/groups?topic=orders", ""},
		{"GET", "/groups", ""},
		{"POST", "/api/groups/retire", `{"topic":"orders","group":"audit"}`},
		{"POST", "/groups/retire", "topic=orders&group=audit"},
		{"POST", "/groups/retire", "topic=orders&group=audit&confirm=yes&force=1"},
	} {
		code, body := do(t, tc.method, base+tc.path, tc.body, "Content-Type", "application/x-www-form-urlencoded")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "503 service unavailable: cannot reach the database") {
			t.Errorf("%s %s: %d %q, want 503", tc.method, tc.path, code, body)
		}
		for _, s := range append(secrets, "No dead letters match", `"done"`, "[]", "sql:", "closed", "dial", "refused") {
			if strings.Contains(body, s) {
				t.Errorf("%s %s: the answer contains %q: %s", tc.method, tc.path, s, body)
			}
		}
		if (strings.HasPrefix(tc.path, "/deadletters") || strings.HasPrefix(tc.path, "/groups")) && tc.method == "GET" && !strings.Contains(body, `role="alert" id="error"`) {
			t.Errorf("%s %s: no error alert in the page: %s", tc.method, tc.path, body)
		}
	}
	if !strings.Contains(log.String(), "console: request failed") {
		t.Errorf("nothing logged: %s", log.String())
	}
}

// A console whose database pool is closed under it answers 503 on every
// dead-letter read and action instead of an empty list, 404 or done:0.
func TestDatabaseGoneIsNotEmpty(t *testing.T) { sqlURLs(t, testDatabaseGoneIsNotEmpty) }

func testDatabaseGoneIsNotEmpty(t *testing.T, rawURL string) {
	var log logBuffer
	c := startConsole(t, rawURL, console.Config{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err := c.src.DB.Close(); err != nil {
		t.Fatal(err)
	}
	checkCannotSee(t, c.http.URL, c.queue, &log)
	if !strings.Contains(log.String(), "database is closed") {
		t.Errorf("the log lacks the driver's error: %s", log.String())
	}
}

// The same with a PostgreSQL server that is not there (a port nothing
// listens on): the 503 names no host, port or driver error.
func TestNoDatabaseServerIsNotEmpty(t *testing.T) {
	const u = "postgres://berthuser@127.0.0.1:1/berthdb?sslmode=disable&connect_timeout=2"
	src, err := inspect.PlanSQL(u)
	if err != nil {
		t.Fatal(err)
	}
	if src.DB, err = postgres.Open(u, 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.DB.Close() })
	var log logBuffer
	srv, err := console.New(console.Config{Source: src, Kind: src.Kind, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	checkCannotSee(t, hs.URL, "orders", &log, "127.0.0.1:1", "berthuser", "berthdb")
	if !strings.Contains(log.String(), "127.0.0.1") {
		t.Errorf("the log lacks the detail: %s", log.String())
	}
}

// A failure of a database that answers is a 500 whose body names nothing
// of the database (its text is in the log).
func TestInternalErrorIsGeneric(t *testing.T) {
	var log logBuffer
	c := startConsole(t, testenv.PostgresSchemaURL(t), console.Config{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if _, err := c.src.DB.Exec(`ALTER TABLE ` + c.src.Names.Errors + ` RENAME COLUMN reason TO reason_gone`); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/api/deadletters", "/deadletters", "/api/deadletters/1"} {
		code, body := do(t, "GET", c.http.URL+p, "")
		if code != 500 || !strings.Contains(body, "500 internal server error: the request failed") ||
			strings.Contains(body, "reason") || strings.Contains(body, "SQLSTATE") || strings.Contains(body, c.src.Names.Errors) {
			t.Errorf("%s: %d %q", p, code, body)
		}
	}
	code, body := do(t, "POST", c.http.URL+"/api/deadletters/replay", `{"ids":["1"]}`)
	if code != 500 || strings.Contains(body, "reason") || strings.Contains(body, "SQLSTATE") {
		t.Errorf("replay: %d %q", code, body)
	}
	if !strings.Contains(log.String(), "reason") {
		t.Errorf("the log lacks the detail: %s", log.String())
	}
}

// PostgreSQL refuses NUL bytes and invalid UTF-8 in text (SQLSTATE 22021):
// the console answers 400 naming the field before the database sees them,
// on the filter, the pause reason and the queue name, and refuses an id
// that is no dead letter's, a body with more after its JSON, and nothing
// is changed.
func TestBadTextIs400(t *testing.T) {
	c := startConsole(t, testenv.PostgresSchemaURL(t), console.Config{})
	q := c.queue
	for _, tc := range []struct {
		method, path, body string
		want               string
	}{
		{"GET", "/api/deadletters?reason=a%00b", "", "reason contains a NUL byte"},
		{"GET", "/api/deadletters?reason=%ff%fe", "", "reason is not valid UTF-8"},
		{"GET", "/api/deadletters?queue=a%00b", "", "queue contains a NUL byte"},
		{"GET", "/api/deadletters?queue=%c3%28", "", "queue is not valid UTF-8"},
		{"GET", "/deadletters?reason=a%00b", "", "reason contains a NUL byte"},
		{"POST", "/api/deadletters/replay", `{"all":true,"filter":{"reason":"a\u0000b"}}`, "reason contains a NUL byte"},
		{"POST", "/api/deadletters/delete", `{"all":true,"filter":{"queue":"a\u0000"}}`, "queue contains a NUL byte"},
		{"POST", "/deadletters/delete", "all=1&confirm=yes&reason=%ff", "reason is not valid UTF-8"},
		{"POST", "/api/queues/" + q + "/pause", `{"by":"x\u0000y"}`, "by contains a NUL byte"},
		{"POST", "/queues/" + q + "/pause", "confirm=yes&by=%ff", "by is not valid UTF-8"},
		{"POST", "/queues/" + q + "/pause", "confirm=yes&by=a%00", "by contains a NUL byte"},
		{"GET", "/api/queues/a%00b", "", "queue contains a NUL byte"},
		{"GET", "/api/queues/%ff", "", "queue is not valid UTF-8"},
		{"GET", "/queues/%ff", "", "queue is not valid UTF-8"},
		{"POST", "/api/queues/a%00b/pause", "", "queue contains a NUL byte"},
		{"POST", "/api/queues/%ff/resume", "", "queue is not valid UTF-8"},
		{"POST", "/api/deadletters/replay", `{"ids":["abc"]}`, "bad dead-letter id"},
		{"POST", "/api/deadletters/delete", `{"ids":["1","abc"]}`, "bad dead-letter id"},
		{"POST", "/deadletters/delete", "id=abc&confirm=yes", "bad dead-letter id"},
		{"GET", "/api/deadletters/abc", "", "bad dead-letter id"},
		{"GET", "/api/deadletters/%ff", "", "not a dead-letter id"},
		{"POST", "/api/deadletters/delete", `{"ids":["1"]} trailing`, "more after the JSON value"},
		{"POST", "/api/deadletters/delete", `{"ids":["1"]}{"ids":["2"]}`, "more after the JSON value"},
		{"POST", "/api/deadletters/delete", `{"ids":["1"]}}`, "more after the JSON value"},
		{"POST", "/api/queues/" + q + "/pause", `{"by":"x"} []`, "more after the JSON value"},
	} {
		code, body := do(t, tc.method, c.http.URL+tc.path, tc.body, "Content-Type", "application/x-www-form-urlencoded")
		if code != 400 || !strings.Contains(body, tc.want) || strings.Contains(body, "SQLSTATE") {
			t.Errorf("%s %s %q: %d %q, want 400 containing %q", tc.method, tc.path, tc.body, code, body, tc.want)
		}
	}
	if ps, err := c.src.Paused(context.Background()); err != nil || len(ps) != 0 {
		t.Errorf("paused by a refused request: %+v %v", ps, err)
	}
	if ds, err := c.src.DeadLetters(context.Background(), inspect.Filter{}, 0); err != nil || len(ds) != 4 {
		t.Errorf("dead letters after refused requests: %d %v", len(ds), err)
	}
	// Text that is merely unusual still works.
	for _, p := range []string{"/api/deadletters?reason=" + url.QueryEscape("déclined ✓"), "/api/deadletters?reason=" + url.QueryEscape("line\nbreak")} {
		if code, body := do(t, "GET", c.http.URL+p, ""); code != 200 {
			t.Errorf("%s: %d %s", p, code, body)
		}
	}
}
