package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The pause API: pause and resume by topic or table, repeated actions
// report no change, the queue list shows paused queues; bad input, unknown
// queues, read-only consoles and cross-site posts are refused and change
// nothing.
func TestPauseAPI(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{})
	api := c.http.URL + "/api/queues/"
	var res struct {
		Action, Queue string
		Changed       bool
	}
	code, body := do(t, "POST", api+"orders/pause", `{"by":"incident 7"}`)
	if code != 200 || json.Unmarshal([]byte(body), &res) != nil || !res.Changed || res.Queue != c.queue {
		t.Fatalf("pause: %d %s", code, body)
	}
	if code, body = do(t, "POST", api+c.queue+"/pause", ``); code != 200 || !strings.Contains(body, `"changed": false`) {
		t.Fatalf("second pause: %d %s", code, body)
	}
	code, body = do(t, "GET", c.http.URL+"/api/queues", "")
	var list struct {
		Queues []struct {
			Name     string
			Paused   bool
			PausedBy string `json:"paused_by"`
		}
	}
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("queues: %d %s", code, body)
	}
	for _, q := range list.Queues {
		if q.Paused != (q.Name == c.queue) || (q.Paused && q.PausedBy != "incident 7") {
			t.Errorf("queue %+v", q)
		}
	}
	for _, tc := range []struct {
		method, path, body string
		hdr                []string
		code               int
		says               string
	}{
		{"POST", api + "nope/pause", "", nil, 404, "not a queue"},
		{"POST", api + c.queue + "/stop", "", nil, 404, "no action"},
		{"POST", api + c.queue + "/resume", `{"who":1}`, nil, 400, "body"},
		{"POST", api + c.queue + "/resume", "", []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross-site"},
		{"GET", c.http.URL + "/api/fleet?sort=bogus", "", nil, 400, "sort"},
	} {
		code, body := do(t, tc.method, tc.path, tc.body, tc.hdr...)
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("%s %s: %d %s, want %d with %q", tc.method, tc.path, code, body, tc.code, tc.says)
		}
	}
	if ps, _ := c.src.Paused(context.Background()); len(ps) != 1 {
		t.Fatalf("refused requests changed the paused rows: %+v", ps)
	}
	if code, body = do(t, "POST", api+"orders/resume", ``); code != 200 || !strings.Contains(body, `"changed": true`) {
		t.Fatalf("resume: %d %s", code, body)
	}
	if ps, _ := c.src.Paused(context.Background()); len(ps) != 0 {
		t.Fatalf("after resume: %+v", ps)
	}

	ro := startConsole(t, sqliteURL(t), console.Config{ReadOnly: true})
	if code, body := do(t, "POST", ro.http.URL+"/api/queues/orders/pause", ""); code != 403 || !strings.Contains(body, "read-only") {
		t.Fatalf("read-only pause: %d %s", code, body)
	}
	if code, body := do(t, "POST", ro.http.URL+"/queues/orders/pause", "confirm=yes", "Content-Type", "application/x-www-form-urlencoded"); code != 403 {
		t.Fatalf("read-only pause form: %d %s", code, body)
	}
	if code, body := do(t, "GET", ro.http.URL+"/queues/"+ro.queue, ""); code != 200 || strings.Contains(body, `id="pause"`) {
		t.Fatalf("read-only queue page offers pause: %d", code)
	}
}

// The pause form asks first, then pauses and redirects with the outcome.
func TestPauseFormConfirms(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{})
	code, body := do(t, "POST", c.http.URL+"/queues/"+c.queue+"/pause", "", "Content-Type", "application/x-www-form-urlencoded")
	if code != 200 || !strings.Contains(body, `id="confirm"`) {
		t.Fatalf("confirmation page: %d %s", code, body)
	}
	if ps, _ := c.src.Paused(context.Background()); len(ps) != 0 {
		t.Fatalf("paused before confirmation: %+v", ps)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.PostForm(c.http.URL+"/queues/"+c.queue+"/pause", url.Values{"confirm": {"yes"}, "back": {"list"}, "by": {"deploy"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if loc := res.Header.Get("Location"); res.StatusCode != 303 || !strings.HasPrefix(loc, "/queues?done=paused") {
		t.Fatalf("after the action: %d %s", res.StatusCode, loc)
	}
	if ps, _ := c.src.Paused(context.Background()); len(ps) != 1 || ps[0].By != "deploy" {
		t.Fatalf("paused rows %+v", ps)
	}
}

// /api/fleet lists the reported rows with their staleness: a row older than
// StaleIntervals of its interval is stale.
func TestFleetAPI(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{})
	code, body := do(t, "GET", c.http.URL+"/api/fleet", "")
	if code != 200 || !strings.Contains(body, `"listeners": []`) {
		t.Fatalf("no reports yet: %d %s", code, body)
	}
	ctx := context.Background()
	if err := sqlqueue.EnsureFleet(ctx, c.src.DB, c.src.Dialect, c.src.Names); err != nil {
		t.Fatal(err)
	}
	fd := c.src.Dialect.(sqlqueue.FleetDialect)
	for _, r := range []inspect.Listener{
		{Instance: "a/1/x", Name: "orders", Queue: c.queue, Host: "a", PID: 1, Status: "faulted", Loop: "faulted", Faulted: true, Fault: "boom", Interval: 1},
		{Instance: "b/2/y", Name: "orders", Queue: c.queue, Host: "b", PID: 2, Status: "accepting", Loop: "running", Interval: 1 << 40},
	} {
		st := fd.UpsertListener(c.src.Names, r)
		if _, err := c.src.DB.ExecContext(ctx, st.SQL, st.Args...); err != nil {
			t.Fatal(err)
		}
	}
	var got struct {
		Listeners []struct {
			Instance string
			Status   string
			Fault    string
			Stale    bool
		}
	}
	// The 1ns-interval row is stale as soon as a millisecond passed.
	waitCond(t, "the short-interval row to go stale", func() bool {
		code, body = do(t, "GET", c.http.URL+"/api/fleet?sort=host", "")
		if code != 200 || json.Unmarshal([]byte(body), &got) != nil || len(got.Listeners) != 2 {
			t.Fatalf("fleet: %d %s", code, body)
		}
		return got.Listeners[0].Stale
	})
	if l := got.Listeners[0]; l.Instance != "a/1/x" || l.Status != "faulted" || l.Fault != "boom" {
		t.Errorf("first row %+v", l)
	}
	if got.Listeners[1].Stale {
		t.Errorf("the long-interval row is stale")
	}
	code, body = do(t, "GET", c.http.URL+"/fleet?q=faulted", "")
	if code != 200 || !strings.Contains(body, "a/1/x") || strings.Contains(body, "b/2/y") {
		t.Fatalf("fleet page filtered on faulted: %d", code)
	}
}
