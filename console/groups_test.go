package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// groupSQL runs fn against a fresh SQLite file and a fresh PostgreSQL
// schema, with the URL ready for more query parameters.
func groupSQL(t *testing.T, fn func(t *testing.T, rawURL, sep string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, sqliteURL(t), "?") })
	t.Run("postgres", func(t *testing.T) { fn(t, testenv.PostgresSchemaURL(t), "&") })
}

type groupJSON struct {
	Topic      string  `json:"topic"`
	Group      string  `json:"group"`
	Queue      string  `json:"queue"`
	Ready      int64   `json:"ready"`
	Delayed    int64   `json:"delayed"`
	InFlight   int64   `json:"in_flight"`
	OldestSecs float64 `json:"oldest_seconds"`
	Missing    bool    `json:"missing"`
	LastReader struct {
		Basis    string    `json:"basis"`
		At       time.Time `json:"at"`
		Instance string    `json:"instance"`
		Live     bool      `json:"live"`
		Text     string    `json:"text"`
	} `json:"last_reader"`
}

// getGroups reads /api/groups?query, keyed by topic/group.
func getGroups(t *testing.T, base, query string) (map[string]groupJSON, int) {
	t.Helper()
	code, body := do(t, "GET", base+"/api/groups?"+query, "")
	var l struct {
		Groups    []groupJSON `json:"groups"`
		Reporting int         `json:"reporting"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &l) != nil {
		t.Fatalf("groups ?%s: %d %s", query, code, body)
	}
	m := map[string]groupJSON{}
	for _, g := range l.Groups {
		m[g.Topic+"/"+g.Group] = g
	}
	return m, l.Reporting
}

// addGroup registers group of topic and puts n ready messages in its
// queue; it returns the queue's table name.
func addGroup(t *testing.T, c *seeded, topic, group string, n int) string {
	t.Helper()
	ctx := context.Background()
	if _, _, err := c.src.Migrate(ctx, sqlqueue.QueueRef{Topic: topic, ConsumerGroup: group}); err != nil {
		t.Fatal(err)
	}
	q := sqlqueue.QueueFor(c.src.Dialect, c.src.Tables, topic, group)
	var rows []sqlqueue.InsertRow
	for range n {
		rows = append(rows, sqlqueue.InsertRow{UUID: topic + "-" + group, Headers: []byte("{}"), Body: []byte("x")})
	}
	if n > 0 {
		for _, st := range c.src.Dialect.Insert(q, rows) {
			if _, err := c.src.DB.ExecContext(ctx, st.SQL, st.Args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	return q.Name
}

// liveGroup starts a subscriber of group of topic that reports to the
// fleet table every 100ms, and waits until the console shows it as the
// group's live last reader.
func liveGroup(t *testing.T, c *seeded, rawURL, sep, topic, group string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sub, err := transport.OpenSubscriber(ctx, rawURL+sep+"fleet_interval=100ms", transport.WithConsumerGroup(group))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = sub.Close() })
	waitCond(t, group+" read live by the fleet", func() bool {
		gs, _ := getGroups(t, c.http.URL, "topic="+url.QueryEscape(topic))
		r := gs[topic+"/"+group].LastReader
		return r.Basis == "fleet" && r.Live
	})
}

// The Groups page and /api/groups list every topic's groups, the default
// readers included, with their counts, oldest age and last reader (live
// from the fleet table, a lease or a dead letter, never), and mark a group
// whose table is missing; ?topic= keeps one topic's.
func TestGroupsAPI(t *testing.T) {
	groupSQL(t, func(t *testing.T, rawURL, sep string) {
		c := startConsole(t, rawURL, console.Config{})
		base := c.http.URL
		audit := addGroup(t, c, "orders", "audit", 3)
		ghost := addGroup(t, c, "orders", "ghost", 0)
		if _, err := c.src.DB.Exec(`DROP TABLE ` + sqlqueue.QueueFor(c.src.Dialect, c.src.Tables, "orders", "ghost").Table); err != nil {
			t.Fatal(err)
		}
		liveGroup(t, c, rawURL, sep, "orders", "billing")

		gs, reporting := getGroups(t, base, "")
		if len(gs) != 5 || reporting == 0 {
			t.Fatalf("groups: %d %+v, %d reporting", len(gs), gs, reporting)
		}
		if o := gs["orders/"]; o.Queue != c.queue || o.Ready != 4 || o.Delayed != 2 || o.InFlight != 1 || o.OldestSecs <= 0 ||
			(o.LastReader.Basis != "lease" && o.LastReader.Basis != "dead letter") || o.LastReader.At.IsZero() || !strings.Contains(o.LastReader.Text, " ago (") {
			t.Errorf("orders' default reader: %+v", o)
		}
		if a := gs["orders/audit"]; a.Queue != audit || a.Ready != 3 || a.InFlight != 0 || a.OldestSecs <= 0 || a.LastReader.Basis != "never" || a.LastReader.Text != "never" {
			t.Errorf("audit: %+v", a)
		}
		if b := gs["orders/billing"]; !b.LastReader.Live || b.LastReader.Instance == "" || !strings.HasPrefix(b.LastReader.Text, "live, ") {
			t.Errorf("billing: %+v", b)
		}
		if g := gs["orders/ghost"]; g.Queue != ghost || !g.Missing {
			t.Errorf("ghost: %+v", g)
		}
		if e := gs["emails/"]; e.Ready != 1 || e.LastReader.Basis != "never" {
			t.Errorf("emails: %+v", e)
		}
		if one, _ := getGroups(t, base, "topic=emails"); len(one) != 1 {
			t.Errorf("?topic=emails: %+v", one)
		}
		if none, _ := getGroups(t, base, "topic=nope"); len(none) != 0 {
			t.Errorf("?topic=nope: %+v", none)
		}

		code, body := do(t, "GET", base+"/groups", "")
		for _, want := range []string{`href="/groups" aria-current="page"`, `data-group="audit"`, "(default reader)", `<span class="badge ok">live</span>`,
			`data-field="missing"`, `name="group" value="audit"`, `>never<`, "listener(s) report to the fleet table"} {
			if code != 200 || !strings.Contains(body, want) {
				t.Errorf("/groups: %d, lacks %q", code, want)
			}
		}
		if code, body := do(t, "GET", base+"/groups?topic=emails", ""); code != 200 || strings.Contains(body, `data-group="audit"`) || !strings.Contains(body, `data-topic="emails"`) {
			t.Errorf("/groups?topic=emails: %d %s", code, body)
		}
		for _, p := range []string{"/api/groups?topic=a%00b", "/groups?topic=%ff"} {
			if code, body := do(t, "GET", base+p, ""); code != 400 {
				t.Errorf("%s: %d %s, want 400", p, code, body)
			}
		}
	})
}

// Retire asks first, showing the group's messages and last reader; it is
// refused (409, nothing changed) while the queue holds messages or a
// listener of it reports, as the CLI; with force it unregisters the group
// and drops its queue. The default reader is no group (400); cross-site
// posts are refused.
func TestRetireGroup(t *testing.T) {
	groupSQL(t, func(t *testing.T, rawURL, sep string) {
		c := startConsole(t, rawURL, console.Config{})
		base := c.http.URL
		audit := addGroup(t, c, "orders", "audit", 3)
		liveGroup(t, c, rawURL, sep, "orders", "billing")
		form := "application/x-www-form-urlencoded"

		code, body := do(t, "POST", base+"/groups/retire", "topic=orders&group=audit", "Content-Type", form)
		for _, want := range []string{`<strong id="count">3</strong>`, `id="last-reader">never<`, `id="has-messages"`, `name="force"`, `id="confirm"`} {
			if code != 200 || !strings.Contains(body, want) {
				t.Errorf("confirmation: %d, lacks %q: %s", code, want, body)
			}
		}
		if code, body := do(t, "POST", base+"/groups/retire", "topic=orders&group=billing", "Content-Type", form); code != 200 || !strings.Contains(body, `id="live-reader"`) {
			t.Errorf("confirmation of a live group: %d %s", code, body)
		}

		for _, tc := range []struct {
			path, body string
			hdr        []string
			code       int
			says       string
		}{
			{"/api/groups/retire", `{"topic":"orders","group":"audit"}`, nil, 409, "holds 3 message(s) (3 ready, 0 delayed, 0 in flight); nothing changed; retire with force"},
			{"/api/groups/retire", `{"topic":"orders","group":"billing"}`, nil, 409, "live listener(s)"},
			{"/groups/retire", "topic=orders&group=audit&confirm=yes", []string{"Content-Type", form}, 409, "holds 3 message(s)"},
			{"/api/groups/retire", `{"topic":"orders","group":""}`, nil, 400, "no consumer group"},
			{"/api/groups/retire", `{"topic":"orders","group":"audit","grace":"1s"}`, nil, 400, "body"},
			{"/api/groups/retire", `{"topic":"","group":"audit"}`, nil, 400, "topic"},
			{"/api/groups/retire", `{"topic":"orders","group":"audit","force":true}`, []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross-site"},
			{"/groups/retire", "topic=orders&group=audit&confirm=yes&force=1", []string{"Content-Type", form, "Origin", "https://evil.example"}, 403, "cross-site"},
		} {
			if code, body := do(t, "POST", base+tc.path, tc.body, tc.hdr...); code != tc.code || !strings.Contains(body, tc.says) {
				t.Errorf("POST %s %s: %d %s, want %d with %q", tc.path, tc.body, code, body, tc.code, tc.says)
			}
		}
		if gs, _ := getGroups(t, base, "topic=orders"); gs["orders/audit"].Ready != 3 || gs["orders/billing"].Queue == "" {
			t.Fatalf("a refused retire changed the groups: %+v", gs)
		}

		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := client.PostForm(base+"/groups/retire", url.Values{"topic": {"orders"}, "group": {"audit"}, "confirm": {"yes"}, "force": {"1"}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		loc := res.Header.Get("Location")
		if res.StatusCode != 303 || !strings.HasPrefix(loc, "/groups?") || !strings.Contains(loc, "dropped=true") || !strings.Contains(loc, "n=3") {
			t.Fatalf("after the retire: %d %s", res.StatusCode, loc)
		}
		if code, body := do(t, "GET", base+loc, ""); code != 200 || !strings.Contains(body, "Retired group audit of topic orders") || !strings.Contains(body, "Dropped "+audit+" (3 message(s))") {
			t.Errorf("the outcome: %d %s", code, body)
		}
		if gs, _ := getGroups(t, base, "topic=orders"); len(gs) != 2 {
			t.Errorf("groups after the retire: %+v", gs)
		}
		if _, err := c.src.Queue(context.Background(), audit); !errors.Is(err, transport.ErrQueueNotFound) {
			t.Errorf("the retired queue: %v", err)
		}
		code, body = do(t, "POST", base+"/api/groups/retire", `{"topic":"orders","group":"audit"}`)
		if code != 200 || !strings.Contains(body, `"unregistered": false`) || !strings.Contains(body, `"dropped": false`) {
			t.Errorf("a second retire: %d %s", code, body)
		}
	})
}

// A read-only console lists the groups without a Retire button, and
// refuses the retire (403) from the API and the form, changing nothing.
func TestRetireReadOnly(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{ReadOnly: true})
	addGroup(t, c, "orders", "audit", 0)
	if code, body := do(t, "POST", c.http.URL+"/api/groups/retire", `{"topic":"orders","group":"audit","force":true}`); code != 403 || !strings.Contains(body, "read-only") {
		t.Errorf("read-only retire: %d %s", code, body)
	}
	if code, body := do(t, "POST", c.http.URL+"/groups/retire", "topic=orders&group=audit&confirm=yes&force=1", "Content-Type", "application/x-www-form-urlencoded"); code != 403 {
		t.Errorf("read-only retire form: %d %s", code, body)
	}
	code, body := do(t, "GET", c.http.URL+"/groups", "")
	if code != 200 || !strings.Contains(body, `data-group="audit"`) || strings.Contains(body, `method="post"`) {
		t.Errorf("read-only groups page: %d %s", code, body)
	}
	if gs, _ := getGroups(t, c.http.URL, ""); gs["orders/audit"].Queue == "" {
		t.Errorf("read-only console retired: %+v", gs)
	}
}

// A topic's and a group's hostile names are text on the groups page and the
// confirmation, never markup.
func TestGroupsEscapeHostileStrings(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{})
	evil := `<script>alert(1)</script><img src=x onerror=alert(2)>`
	addGroup(t, c, evil, `"><svg onload=alert(3)>`, 1)
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/groups", ""},
		{"GET", "/groups?topic=" + url.QueryEscape(evil), ""},
		{"POST", "/groups/retire", url.Values{"topic": {evil}, "group": {`"><svg onload=alert(3)>`}}.Encode()},
	} {
		code, body := do(t, req.method, c.http.URL+req.path, req.body, "Content-Type", "application/x-www-form-urlencoded")
		if code != 200 || !strings.Contains(body, "&lt;script&gt;alert(1)") {
			t.Fatalf("%s %s: %d %s", req.method, req.path, code, body)
		}
		for _, raw := range []string{"<script>alert", "<img src=x", "<svg onload"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s %s: %q unescaped", req.method, req.path, raw)
			}
		}
	}
}

// Without a consumer-group registry (SQS) there is no Groups link, the page
// says why and the API answers 501.
func TestGroupsNotAvailableWithoutRegistry(t *testing.T) {
	srv, err := console.New(console.Config{Source: noBrowseSource{}, Kind: "sqs"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	if code, body := do(t, "GET", hs.URL+"/queues", ""); code != 200 || strings.Contains(body, `href="/groups"`) {
		t.Errorf("queues page links to groups: %d", code)
	}
	if code, body := do(t, "GET", hs.URL+"/groups", ""); code != 501 || !strings.Contains(body, "not available") {
		t.Errorf("page: %d %s", code, body)
	}
	for _, tc := range []struct{ method, path, body string }{{"GET", "/api/groups", ""}, {"POST", "/api/groups/retire", `{"topic":"jobs","group":"a"}`}} {
		if code, body := do(t, tc.method, hs.URL+tc.path, tc.body); code != 501 {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, code, body)
		}
	}
}
