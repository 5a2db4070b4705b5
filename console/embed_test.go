package console_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
	"github.com/berth-go/berth/internal/testenv"
)

// mounted is a console mounted under /ops/berth/ of a service's mux,
// behind the service's own basic-auth middleware.
type mounted struct {
	*seeded
	base string // the service's URL with the prefix, no trailing slash
}

func requireUser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "ops" || p != "pw" {
			w.Header().Set("WWW-Authenticate", `Basic realm="svc"`)
			http.Error(w, "service: log in", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func startMounted(t *testing.T, rawURL string, cfg console.Config) *mounted {
	t.Helper()
	src := open(t, rawURL)
	names := inspecttest.Seed(t, src, seedQueues()...)
	cfg.Source, cfg.Kind, cfg.Prefix = src, src.Kind, "/ops/berth/"
	srv, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ops/berth/healthz", srv.Handler()) // unauthenticated
	mux.Handle("/ops/berth/", requireUser(srv.Handler()))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "service: not mine", http.StatusTeapot) })
	hs := serve(t, srv, mux)
	return &mounted{seeded: &seeded{src: src, srv: srv, http: hs, queue: names[0]}, base: hs.URL + "/ops/berth"}
}

var linkAttr = regexp.MustCompile(`(?:href|src|action|formaction|data-poll)="([^"#][^"]*)"`)

// Every link, form action, asset URL and poll URL of every page of a
// console mounted under a prefix starts with the prefix and answers there
// (no 418 from the service's own catch-all), and the redirects keep it.
func TestMountedUnderPrefix(t *testing.T) {
	m := startMounted(t, testenv.PostgresSchemaURL(t), console.Config{})
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		req.SetBasicAuth("ops", "pw")
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	if code, _ := do(t, "GET", m.base+"/queues", ""); code != http.StatusUnauthorized {
		t.Fatalf("without the service's credentials: %d", code)
	}
	if res, _ := get(m.base + "/"); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ops/berth/queues" {
		t.Errorf("GET %s/: %d Location %q", m.base, res.StatusCode, res.Header.Get("Location"))
	}
	seen := map[string]bool{}
	todo := []string{"/ops/berth/queues", "/ops/berth/queues/" + m.queue, "/ops/berth/deadletters", "/ops/berth/deadletters/1", "/ops/berth/fleet", "/ops/berth/groups", "/ops/berth/queues/" + m.queue + "/messages"}
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		res, body := get(m.http.URL + p)
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %.200s", p, res.StatusCode, body)
			continue
		}
		if !strings.Contains(res.Header.Get("Content-Type"), "text/html") {
			continue
		}
		for _, mm := range linkAttr.FindAllStringSubmatch(body, -1) {
			link := strings.ReplaceAll(mm[1], "&amp;", "&")
			if strings.HasPrefix(link, "?") || link == "data:," {
				continue // the same page, another view; the empty icon
			}
			if !strings.HasPrefix(link, "/ops/berth/") {
				t.Errorf("%s links to %q, outside the prefix", p, link)
				continue
			}
			u, _ := url.Parse(link)
			if strings.HasSuffix(u.Path, "/body") || strings.Contains(mm[0], "action") {
				continue // downloads and form targets (POST) are checked below
			}
			if len(seen) < 60 {
				todo = append(todo, link)
			}
		}
	}
	// A confirmed action redirects under the prefix, and the Origin check
	// holds: the service's own origin passes, another site's does not.
	form := url.Values{"confirm": {"yes"}, "by": {"ops"}}.Encode()
	req, _ := http.NewRequest("POST", m.base+"/queues/"+m.queue+"/pause", strings.NewReader(form))
	req.SetBasicAuth("ops", "pw")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", m.http.URL)
	res, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ops/berth/queues/"+m.queue+"?") {
		t.Errorf("pause: %d Location %q", res.StatusCode, loc)
	}
	req, _ = http.NewRequest("POST", m.base+"/queues/"+m.queue+"/resume", strings.NewReader(form))
	req.SetBasicAuth("ops", "pw")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.test")
	res, err = cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site resume under the prefix: %d, want 403", res.StatusCode)
	}
	// The service's other paths stay the service's.
	if code, _ := do(t, "GET", m.http.URL+"/queues", ""); code != http.StatusTeapot {
		t.Errorf("GET /queues outside the prefix: %d", code)
	}
}

// The embedding service's Host is refused (421) unless AllowedHosts names
// it, and "*" allows any; loopback Hosts stay allowed.
func TestAllowedHosts(t *testing.T) {
	for _, tc := range []struct {
		allowed []string
		host    string
		want    int
	}{
		{nil, "svc.example.com", http.StatusMisdirectedRequest},
		{[]string{"svc.example.com"}, "svc.example.com", http.StatusOK},
		{[]string{"SVC.example.com"}, "svc.example.com:8443", http.StatusOK},
		{[]string{"svc.example.com"}, "evil.test", http.StatusMisdirectedRequest},
		{[]string{"svc.example.com"}, "localhost", http.StatusOK},
		{[]string{"*"}, "anything.test", http.StatusOK},
	} {
		m := startMounted(t, sqliteURL(t), console.Config{AllowedHosts: tc.allowed})
		code, body := doHost(t, "GET", m.base+"/api/queues", tc.host, "", "Authorization", "Basic b3BzOnB3")
		if code != tc.want {
			t.Errorf("AllowedHosts %q, Host %s: %d %.100s, want %d", tc.allowed, tc.host, code, body, tc.want)
		}
	}
	if _, err := console.New(console.Config{Source: noBrowseSource{}, AllowedHosts: []string{"http://x"}}); err == nil {
		t.Error("AllowedHosts with a scheme accepted")
	}
	for _, p := range []string{"ops", "/ops?x", "/a//b", "/a/../b"} {
		if _, err := console.New(console.Config{Source: noBrowseSource{}, Prefix: p}); err == nil {
			t.Errorf("Prefix %q accepted", p)
		}
	}
}

// GET <prefix>/healthz answers 200 without credentials while the database
// answers, and 503 with a short reason naming no connection detail once it
// does not.
func TestHealthz(t *testing.T) {
	u := testenv.PostgresSchemaURL(t)
	m := startMounted(t, u, console.Config{})
	if code, body := doHost(t, "GET", m.base+"/healthz", "10.1.2.3:80", ""); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	if err := m.src.DB.Close(); err != nil {
		t.Fatal(err)
	}
	code, body := do(t, "GET", m.base+"/healthz", "")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "unavailable: the console cannot reach its database") {
		t.Fatalf("healthz with the database closed: %d %q", code, body)
	}
	pu, _ := url.Parse(u)
	for _, secret := range []string{pu.Host, pu.User.Username(), "sql:"} {
		if secret != "" && strings.Contains(body, secret) {
			t.Errorf("healthz body names %q: %q", secret, body)
		}
	}
}

// In a browser, a console mounted under a prefix behind the service's
// authentication is clicked through: queues, a queue, its messages, the
// dead letters, one dead letter and its replay confirmation, every page
// and asset under the prefix.
func TestBrowserMountedUnderPrefix(t *testing.T) {
	m := startMounted(t, testenv.PostgresSchemaURL(t), console.Config{})
	ctx := browser(t, map[string]any{"Authorization": "Basic b3BzOnB3"})
	run(t, ctx, chromedp.Navigate(m.base+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="`+m.queue+`"]`)))
	waitTrue(t, ctx, `document.getElementById("updated").textContent.startsWith("Updated")`)
	run(t, ctx, chromedp.Click(chromedp.CSS(`tr[data-queue="`+m.queue+`"] th a`)), chromedp.WaitVisible(chromedp.CSS(`#history`)))
	waitTrue(t, ctx, `document.getElementById("history").complete && document.getElementById("history").naturalWidth > 0`)
	run(t, ctx, chromedp.Click(chromedp.CSS(`#browse-messages`)), chromedp.WaitReady(chromedp.CSS(`#search`)))
	run(t, ctx, chromedp.Click(chromedp.CSS(`nav a[href$="/deadletters"]`)), chromedp.WaitVisible(chromedp.CSS(`#dead`)),
		chromedp.Click(chromedp.CSS(`#dead tbody tr td a`)), chromedp.WaitVisible(chromedp.CSS(`#replay-one`)),
		chromedp.Click(chromedp.CSS(`#replay-one`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if p := eval[string](t, ctx, `location.pathname`); p != "/ops/berth/deadletters/replay" {
		t.Errorf("confirmation at %q", p)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	if p := eval[string](t, ctx, `location.pathname`); p != "/ops/berth/deadletters" {
		t.Errorf("after replay at %q", p)
	}
	if out := eval[[]string](t, ctx, `performance.getEntriesByType("resource").map(e => e.name).filter(n => !new URL(n).pathname.startsWith("/ops/berth/"))`); len(out) != 0 {
		t.Errorf("resources loaded outside the prefix: %q", out)
	}
	if css := eval[bool](t, ctx, `getComputedStyle(document.body).fontFamily !== "" && document.styleSheets.length > 0`); !css {
		t.Error("stylesheet not loaded under the prefix")
	}
}
