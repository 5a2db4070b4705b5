package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/transport/sqlqueue"
)

type msgsJSON struct {
	Messages []struct {
		ID          string `json:"id"`
		UUID        string `json:"uuid"`
		State       string `json:"state"`
		Version     string `json:"version"`
		Cancellable bool   `json:"cancellable"`
		Preview     string `json:"preview"`
	} `json:"messages"`
	Next    string `json:"next"`
	Partial bool   `json:"partial"`
}

func getMessages(t *testing.T, base, query string) msgsJSON {
	t.Helper()
	code, body := do(t, "GET", base+"/api/queues/orders/messages?"+query, "")
	if code != 200 {
		t.Fatalf("messages ?%s: %d %s", query, code, body)
	}
	var m msgsJSON
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMessagesAPI(t *testing.T) { sqlURLs(t, testMessagesAPI) }

func testMessagesAPI(t *testing.T, rawURL string) {
	c := startConsole(t, rawURL, console.Config{})
	base := c.http.URL
	for st, want := range map[string]int{"": 4, "pending": 4, "delayed": 2, "in_flight": 1, "all": 7} {
		if got := getMessages(t, base, "state="+st); len(got.Messages) != want {
			t.Errorf("state %q: %d messages, want %d", st, len(got.Messages), want)
		}
	}
	// Keyset pages: two of two, then the rest, no repeats.
	p1 := getMessages(t, base, "state=pending&limit=2")
	p2 := getMessages(t, base, "state=pending&limit=2&cursor="+url.QueryEscape(p1.Next))
	if len(p1.Messages) != 2 || len(p2.Messages) != 2 || p1.Messages[1].ID == p2.Messages[0].ID || p2.Next != "" {
		t.Errorf("pages: %+v then %+v", p1, p2)
	}
	if got := getMessages(t, base, "state=all&uuid=orders-r1"); len(got.Messages) != 1 || got.Messages[0].UUID != "orders-r1" {
		t.Errorf("uuid search: %+v", got)
	}
	if got := getMessages(t, base, "state=in_flight"); got.Messages[0].Cancellable {
		t.Errorf("an in-flight message is cancellable: %+v", got)
	}
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/api/queues/orders/messages?state=sideways", 400},
		{"/api/queues/orders/messages?cursor=zz", 400},
		{"/api/queues/orders/messages?value=v", 400},
		{"/api/queues/orders/messages?uuid=a%00b", 400},
		{"/api/queues/orders/messages?limit=0", 400},
		{"/api/queues/nope/messages", 404},
		{"/api/queues/orders/messages/999999", 404},
		{"/api/queues/orders/messages/abc", 400},
		{"/queues/nope/messages", 404},
	} {
		if code, body := do(t, "GET", base+tc.path, ""); code != tc.code {
			t.Errorf("GET %s: %d %s, want %d", tc.path, code, body, tc.code)
		}
	}

	// Cancel one as seen: cancelled; again: gone.
	m := getMessages(t, base, "state=pending&limit=1").Messages[0]
	one := `{"messages":[{"id":"` + m.ID + `","version":"` + m.Version + `"}]}`
	code, body := do(t, "POST", base+"/api/queues/orders/messages/cancel", one)
	if code != 200 || !strings.Contains(body, `"cancelled": [`+"\n"+`    "`+m.ID+`"`) {
		t.Fatalf("cancel one: %d %s", code, body)
	}
	code, body = do(t, "POST", base+"/api/queues/orders/messages/cancel", one)
	if code != 200 || !strings.Contains(body, `"gone": [`+"\n"+`    "`+m.ID+`"`) {
		t.Fatalf("cancel one again: %d %s", code, body)
	}
	// A stale version: left alone, reported changed.
	m = getMessages(t, base, "state=pending&limit=1").Messages[0]
	code, body = do(t, "POST", base+"/api/queues/orders/messages/cancel", `{"messages":[{"id":"`+m.ID+`","version":"0.1"}]}`)
	if code != 200 || !strings.Contains(body, `"changed": [`+"\n"+`    "`+m.ID+`"`) {
		t.Fatalf("cancel as not seen: %d %s", code, body)
	}
	// All matching: the count first (dry run), then up to it.
	for _, bad := range []string{
		`{"all":true}`,
		`{"all":true,"filter":{"state":"in_flight"},"dry_run":true}`,
		`{"messages":[{"id":"1","version":"0.1"}],"all":true}`,
		`{"messages":[]}`,
		`{"messages":[{"id":"1","version":"0.1"}],"dry_run":true}`,
		`{"all":true,"dry_run":true} trailing`,
	} {
		if code, body := do(t, "POST", base+"/api/queues/orders/messages/cancel", bad); code != 400 {
			t.Errorf("%s: %d %s, want 400", bad, code, body)
		}
	}
	code, body = do(t, "POST", base+"/api/queues/orders/messages/cancel", `{"all":true,"filter":{"state":"all"},"dry_run":true}`)
	var dry struct {
		Matching int64 `json:"matching"`
		UpTo     int64 `json:"up_to"`
	}
	if err := json.Unmarshal([]byte(body), &dry); code != 200 || err != nil || dry.Matching != 5 {
		t.Fatalf("dry run: %d %s (pending 3 + delayed 2 left)", code, body)
	}
	code, body = do(t, "POST", base+"/api/queues/orders/messages/cancel", `{"all":true,"filter":{"state":"all"},"up_to":`+jsonInt(dry.UpTo)+`}`)
	if code != 200 || strings.Count(body, `"`) < 10 {
		t.Fatalf("purge: %d %s", code, body)
	}
	if got := getMessages(t, base, "state=all"); len(got.Messages) != 1 || got.Messages[0].State != "in_flight" {
		t.Errorf("after the purge: %+v, want only the in-flight message", got)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// The forms ask first, with the count for "all matching", and report what
// happened; read-only, cross-site and SQS refuse.
func TestCancelFormConfirms(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{})
	base := c.http.URL
	form := url.Values{"all": {"1"}, "state": {"all"}, "purge": {"1"}}
	code, body := do(t, "POST", base+"/queues/orders/messages/cancel", form.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	if code != 200 || !strings.Contains(body, `<strong id="count">6</strong>`) || !strings.Contains(body, "Purge") {
		t.Fatalf("purge confirmation: %d %s", code, body)
	}
	if got := getMessages(t, base, "state=all"); len(got.Messages) != 7 {
		t.Fatalf("acted before confirmation: %d left", len(got.Messages))
	}
	i := strings.Index(body, `name="up_to" value="`)
	upTo := body[i+len(`name="up_to" value="`):]
	upTo = upTo[:strings.Index(upTo, `"`)]
	// One published after the count stays.
	insertMsg(t, c, sqlqueue.InsertRow{UUID: "late", Headers: []byte("{}"), Body: []byte("x")})
	form.Set("confirm", "yes")
	form.Set("up_to", upTo)
	form.Set("counted", "6")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.PostForm(base+"/queues/orders/messages/cancel", form)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	loc := res.Header.Get("Location")
	if res.StatusCode != 303 || !strings.Contains(loc, "done=cancelled") || !strings.Contains(loc, "n=6") || !strings.Contains(loc, "of=6") {
		t.Fatalf("after the purge: %d %s", res.StatusCode, loc)
	}
	code, body = do(t, "GET", base+loc, "")
	if code != 200 || !strings.Contains(body, "Cancelled 6 of 6 message(s).") {
		t.Fatalf("flash: %d %s", code, body)
	}
	if got := getMessages(t, base, "state=all"); len(got.Messages) != 2 {
		t.Errorf("left: %+v, want the in-flight and the late message", got)
	}
	// Selected: asks with the ids.
	m := getMessages(t, base, "state=pending").Messages[0]
	code, body = do(t, "POST", base+"/queues/orders/messages/cancel", "m="+url.QueryEscape(m.ID+":"+m.Version), "Content-Type", "application/x-www-form-urlencoded")
	if code != 200 || !strings.Contains(body, "1 selected message(s)") || !strings.Contains(body, "id "+m.ID+")") {
		t.Fatalf("selected confirmation: %d %s", code, body)
	}
	// An empty match says so, with nothing to confirm.
	code, body = do(t, "POST", base+"/queues/orders/messages/cancel", "all=1&uuid=none", "Content-Type", "application/x-www-form-urlencoded")
	if code != 200 || !strings.Contains(body, "Nothing to cancel") || strings.Contains(body, `id="confirm"`) {
		t.Fatalf("empty confirmation: %d %s", code, body)
	}
	for _, bad := range []string{"", "m=garbage", "all=1&state=in_flight", "all=1&confirm=yes", "all=1&confirm=yes&up_to=x"} {
		if code, body := do(t, "POST", base+"/queues/orders/messages/cancel", bad, "Content-Type", "application/x-www-form-urlencoded"); code != 400 {
			t.Errorf("form %q: %d %s, want 400", bad, code, body)
		}
	}
	// Cross-site: refused before anything runs.
	code, _ = do(t, "POST", base+"/queues/orders/messages/cancel", "m="+url.QueryEscape(m.ID+":"+m.Version)+"&confirm=yes", "Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site")
	code2, _ := do(t, "POST", base+"/api/queues/orders/messages/cancel", `{"messages":[{"id":"`+m.ID+`","version":"`+m.Version+`"}]}`, "Origin", "http://evil.example")
	if code != 403 || code2 != 403 {
		t.Fatalf("cross-site cancel: form %d, API %d", code, code2)
	}
	if got := getMessages(t, base, "state=pending"); len(got.Messages) != 1 {
		t.Fatalf("a cross-site post cancelled: %+v", got)
	}
	// The dead letters' "all matching" shows its count too.
	code, body = do(t, "POST", base+"/deadletters/delete", "all=1&reason=card", "Content-Type", "application/x-www-form-urlencoded")
	if code != 200 || !strings.Contains(body, `<strong id="count">2</strong> <strong>dead letter(s)</strong>`) {
		t.Fatalf("dead-letter confirmation without its count: %d %s", code, body)
	}
}

func insertMsg(t *testing.T, c *seeded, rows ...sqlqueue.InsertRow) {
	t.Helper()
	q := sqlqueue.QueueFor(c.src.Dialect, c.src.Tables, "orders", "")
	for _, st := range c.src.Dialect.Insert(q, rows) {
		if _, err := c.src.DB.ExecContext(context.Background(), st.SQL, st.Args...); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMessagesReadOnly(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{ReadOnly: true})
	base := c.http.URL
	m := getMessages(t, base, "state=pending").Messages[0]
	code, body := do(t, "POST", base+"/api/queues/orders/messages/cancel", `{"messages":[{"id":"`+m.ID+`","version":"`+m.Version+`"}]}`)
	if code != 403 || !strings.Contains(body, "read-only") {
		t.Fatalf("read-only cancel: %d %s", code, body)
	}
	code, _ = do(t, "POST", base+"/queues/orders/messages/cancel", "all=1", "Content-Type", "application/x-www-form-urlencoded")
	if code != 403 {
		t.Fatalf("read-only purge form: %d", code)
	}
	for _, page := range []string{"/queues/orders/messages", "/queues/orders/messages/" + m.ID, "/queues/" + c.queue} {
		code, body := do(t, "GET", base+page, "")
		if code != 200 || strings.Contains(body, `method="post"`) || strings.Contains(body, `type="checkbox"`) {
			t.Errorf("read-only %s shows actions: %d", page, code)
		}
	}
	if got := getMessages(t, base, "state=all"); len(got.Messages) != 7 {
		t.Errorf("read-only console changed the queue: %d left", len(got.Messages))
	}
}

// Hostile strings in a message's UUID, metadata and body are text on every
// page, never markup; the body downloads as bytes, never rendered.
func TestMessagesEscapeHostileStrings(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{})
	base := c.http.URL
	evil := `<script>alert(1)</script><img src=x onerror=alert(2)>`
	md, _ := json.Marshal(map[string]string{evil: evil, "k": `"><svg onload=alert(3)>`})
	insertMsg(t, c, sqlqueue.InsertRow{UUID: evil, Headers: md, Body: []byte(evil)})
	got := getMessages(t, base, "state=all&uuid="+url.QueryEscape(evil))
	if len(got.Messages) != 1 {
		t.Fatalf("search by a hostile UUID: %+v", got)
	}
	id := got.Messages[0].ID
	for _, page := range []string{
		"/queues/orders/messages?state=all",
		"/queues/orders/messages?state=all&uuid=" + url.QueryEscape(evil) + "&key=" + url.QueryEscape(evil) + "&value=" + url.QueryEscape(evil),
		"/queues/orders/messages/" + id,
		"/queues/orders/messages/" + id + "?view=text",
	} {
		code, body := do(t, "GET", base+page, "")
		if code != 200 {
			t.Fatalf("%s: %d %s", page, code, body)
		}
		for _, raw := range []string{"<script>alert", "<img src=x", "<svg onload"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s: %q unescaped", page, raw)
			}
		}
		if !strings.Contains(body, "&lt;script&gt;alert(1)") {
			t.Errorf("%s: the hostile text is not shown escaped", page)
		}
	}
	res, err := http.Get(base + "/queues/orders/messages/" + id + "/body")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != evil || res.Header.Get("Content-Type") != "application/octet-stream" ||
		!strings.HasPrefix(res.Header.Get("Content-Disposition"), "attachment") || res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("download: %q %v", b, res.Header)
	}
	res, err = http.Get(base + "/deadletters/1/body")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != `{"order":1,"sku":"A-1"}` || !strings.HasPrefix(res.Header.Get("Content-Disposition"), "attachment") {
		t.Errorf("dead letter download: %q %v", b, res.Header)
	}
}

// noBrowseSource is a Source that cannot browse messages, as SQS.
type noBrowseSource struct{}

func (noBrowseSource) Queues(context.Context) ([]inspect.QueueStats, error) {
	return []inspect.QueueStats{{Queue: "jobs", Ready: 3}}, nil
}
func (noBrowseSource) DeadLetterPage(context.Context, inspect.Filter, string, int) (inspect.Page, error) {
	return inspect.Page{}, nil
}
func (noBrowseSource) ReplayDelayed(context.Context, inspect.Filter, time.Duration) ([]inspect.DeadLetter, error) {
	return nil, nil
}
func (noBrowseSource) Purge(context.Context, inspect.Filter, bool) ([]inspect.DeadLetter, error) {
	return nil, nil
}

func TestMessagesNotAvailableWithoutBrowsing(t *testing.T) {
	srv, err := console.New(console.Config{Source: noBrowseSource{}, Kind: "sqs"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	code, body := do(t, "GET", hs.URL+"/queues/jobs/messages", "")
	if code != 200 || !strings.Contains(body, "not available: SQS cannot browse without receiving") {
		t.Errorf("page: %d %s", code, body)
	}
	code, body = do(t, "GET", hs.URL+"/api/queues/jobs/messages", "")
	if code != 501 || !strings.Contains(body, "SQS cannot browse without receiving") {
		t.Errorf("API: %d %s", code, body)
	}
	if code, _ := do(t, "POST", hs.URL+"/api/queues/jobs/messages/cancel", `{"all":true,"dry_run":true}`); code != 501 {
		t.Errorf("cancel API: %d", code)
	}
	code, body = do(t, "GET", hs.URL+"/queues/jobs", "")
	if code != 200 || strings.Contains(body, `id="purge"`) {
		t.Errorf("queue page offers a purge without browsing: %d", code)
	}
}
