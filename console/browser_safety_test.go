package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/testenv"
)

// DNS rebinding: chromium resolves evil.test to 127.0.0.1 (as a rebound
// attacker domain would), so a page of http://evil.test:PORT is
// same-origin with the console as far as the browser knows. The console
// refuses it: the page, its fetch of the API and its POST of a pause all
// get 421 and no data, and nothing is paused. The console's own address
// still works in the same browser.
func TestBrowserDNSRebinding(t *testing.T) {
	c := startConsole(t, testenv.PostgresSchemaURL(t), console.Config{})
	port := c.http.URL[strings.LastIndex(c.http.URL, ":")+1:]
	ctx := browser(t, nil, chromedp.Flag("host-resolver-rules", "MAP evil.test 127.0.0.1"))
	evil := "http://evil.test:" + port
	run(t, ctx, chromedp.Navigate(evil+"/queues"), chromedp.WaitReady(chromedp.CSS("body")))
	if body := textOf(t, ctx, "body"); !strings.Contains(body, "421 misdirected request") || strings.Contains(body, c.queue) {
		t.Fatalf("the rebound page: %q", body)
	}
	if got := eval[string](t, ctx, `location.host`); got != "evil.test:"+port {
		t.Fatalf("the page is at %s, not at the rebound name", got)
	}
	fetchJS := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	got := fetchJS(`fetch("/api/deadletters").then(async r => r.status + " " + await r.text())`)
	if !strings.HasPrefix(got, "421 ") || strings.Contains(got, "dead_letters") {
		t.Errorf("fetch /api/deadletters from the rebound page: %q", got)
	}
	got = fetchJS(`fetch("/api/queues/` + c.queue + `/pause", {method: "POST", body: '{"by":"rebinding"}'}).then(async r => r.status + " " + await r.text())`)
	if !strings.HasPrefix(got, "421 ") {
		t.Errorf("POST pause from the rebound page: %q", got)
	}
	got = fetchJS(`fetch("/static/console.js").then(r => String(r.status))`)
	if got != "421" {
		t.Errorf("asset from the rebound page: %s", got)
	}
	if ps, err := c.src.Paused(context.Background()); err != nil || len(ps) != 0 {
		t.Fatalf("paused from the rebound page: %+v %v", ps, err)
	}
	run(t, ctx, chromedp.Navigate(c.http.URL+"/queues"), chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="`+c.queue+`"]`)))
}

// With the database gone, the queue list says its counts cannot be
// refreshed (and since when) instead of going on as if current, and the
// dead-letter pages show an alert, never "No dead letters match".
func TestBrowserDatabaseGone(t *testing.T) {
	c := startConsole(t, testenv.PostgresSchemaURL(t), console.Config{Refresh: 200 * time.Millisecond})
	ctx := browser(t, nil)
	row := `tr[data-queue="` + c.queue + `"]`
	run(t, ctx, chromedp.Navigate(c.http.URL+"/queues"), chromedp.WaitVisible(chromedp.CSS(row)))
	waitTrue(t, ctx, `document.getElementById("updated").textContent.startsWith("Updated")`)
	if err := c.src.DB.Close(); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, ctx, `(e => e !== null && !e.hidden)(document.getElementById("poll-error"))`)
	if got := textOf(t, ctx, `#poll-error`); !strings.Contains(got, "Cannot refresh: 503 service unavailable: cannot reach the database") || !strings.Contains(got, "The figures below are from") {
		t.Errorf("poll error %q", got)
	}
	shoot(t, ctx, "queues-unreachable")
	for _, page := range []string{"/deadletters", "/deadletters/1", "/queues/" + c.queue} {
		run(t, ctx, chromedp.Navigate(c.http.URL+page), chromedp.WaitVisible(chromedp.CSS(`#error`)))
		if got := textOf(t, ctx, `#error`); !strings.HasPrefix(got, "503 service unavailable: cannot reach the database") {
			t.Errorf("%s: alert %q", page, got)
		}
		if n := eval[int](t, ctx, `document.querySelectorAll("#empty, #dead").length`); n != 0 {
			t.Errorf("%s: shows a dead-letter table while the database is gone", page)
		}
		if page == "/deadletters" {
			shoot(t, ctx, "deadletters-unreachable")
		}
	}
}
