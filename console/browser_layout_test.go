package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// fitsMain fails when the page's metadata table is wider than main's
// content box: its keys and values must wrap, not widen it.
func fitsMain(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	tw := eval[float64](t, ctx, `document.querySelector("table.meta").getBoundingClientRect().width`)
	mw := eval[float64](t, ctx, `(m => m.clientWidth - parseFloat(getComputedStyle(m).paddingLeft) - parseFloat(getComputedStyle(m).paddingRight))(document.querySelector("main"))`)
	if tw > mw+0.5 {
		t.Errorf("%s: the metadata table is %.0f px wide in a %.0f px main", what, tw, mw)
	}
}

// noSideways fails when the page at path scrolls sideways at the current
// viewport: the document wider than the window.
func noSideways(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	if sw, cw := eval[int](t, ctx, `document.documentElement.scrollWidth`), eval[int](t, ctx, `document.documentElement.clientWidth`); sw > cw {
		t.Errorf("%s scrolls sideways: document %d px wide in a %d px window", what, sw, cw)
	}
}

// The layout points of issue 38 item 7, measured in chromium at a phone's
// 390 px, a tablet's 768 px and a desktop's 1280 px: no page scrolls
// sideways (the read-write queue list with its Actions column, a paused
// queue with a long reason, the dead letters, a dead letter's and a
// message's metadata with long unbroken keys and values, which also fit
// main), the Resume button next to a paused badge is whole and in view,
// the dead-letter pages and API name the topic, and the pause reason
// typed on the queue page reaches the confirmation.
func TestBrowserLayout(t *testing.T) {
	u := testenv.PostgresSchemaURL(t)
	c := startConsole(t, u, console.Config{})
	long := strings.Repeat("x", 180)
	names := inspecttest.Seed(t, c.src, inspecttest.Queue{Topic: "layout-" + strings.Repeat("t", 40), Ready: 1, Dead: []inspecttest.Dead{
		{Reason: "handler: " + long, Body: `{"a":1}`, Metadata: fmt.Sprintf(`{"trace_%s":"%s","k":"v"}`, long, long), Attempts: 3},
	}})
	layoutQueue := names[0]
	md, _ := json.Marshal(map[string]string{"trace_" + long: long, "k": "v"})
	insertMsg(t, c, sqlqueue.InsertRow{UUID: "layout-msg", Headers: md, Body: []byte("{}")})
	msgID := getMessages(t, c.http.URL, "state=all&uuid=layout-msg").Messages[0].ID
	c.srv.SampleNow(context.Background()) // the sampler sees the new queue's topic
	// The API names the topic too.
	code, body := do(t, "GET", c.http.URL+"/api/deadletters?queue="+layoutQueue, "")
	if code != 200 || !strings.Contains(body, `"topic": "layout-ttt`) {
		t.Errorf("/api/deadletters names no topic: %d %.200s", code, body)
	}
	if _, _, err := c.src.Pause(context.Background(), c.queue, "maintenance window "+long); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t, nil)
	var deadID string
	for _, w := range []int64{390, 768, 1280} {
		run(t, ctx, chromedp.EmulateViewport(w, 900)) // classic scrollbars: the strictest width
		at := fmt.Sprintf(" at %d px", w)

		run(t, ctx, chromedp.Navigate(c.http.URL+"/queues"), chromedp.WaitVisible(chromedp.CSS(`#queues`)))
		noSideways(t, ctx, "/queues (read-write)"+at)
		// The Resume button of the paused queue is whole: its box inside
		// its cell, its text not cut, and in view without scrolling the
		// table (inside the visible box of .scroll and of the window).
		btn := `document.getElementById("resume-` + c.queue + `")`
		if !eval[bool](t, ctx, `(b => { const r = b.getBoundingClientRect(), c = b.closest("td").getBoundingClientRect(); return r.left >= c.left - 0.5 && r.right <= c.right + 0.5 && b.scrollWidth <= b.clientWidth })(`+btn+`)`) {
			t.Errorf("the Resume button is clipped%s: button %v, cell %v", at,
				eval[[]float64](t, ctx, `(r => [r.left, r.right])(`+btn+`.getBoundingClientRect())`),
				eval[[]float64](t, ctx, `(r => [r.left, r.right])(`+btn+`.closest("td").getBoundingClientRect())`))
		}
		if !eval[bool](t, ctx, `(b => { const r = b.getBoundingClientRect(), s = b.closest(".scroll").getBoundingClientRect(); return r.left >= s.left - 0.5 && r.right <= s.right + 0.5 && r.right <= document.documentElement.clientWidth })(`+btn+`)`) {
			t.Errorf("the Resume button is cut off by the table's edge%s: button %v, visible table %v", at,
				eval[[]float64](t, ctx, `(r => [r.left, r.right])(`+btn+`.getBoundingClientRect())`),
				eval[[]float64](t, ctx, `(r => [r.left, r.right])(`+btn+`.closest(".scroll").getBoundingClientRect())`))
		}
		run(t, ctx, chromedp.Navigate(c.http.URL+"/queues/"+c.queue), chromedp.WaitVisible(chromedp.CSS(`#resume`)))
		noSideways(t, ctx, "a paused queue's page"+at)

		run(t, ctx, chromedp.Navigate(c.http.URL+"/deadletters?queue="+layoutQueue), chromedp.WaitVisible(chromedp.CSS(`#dead`)))
		noSideways(t, ctx, "/deadletters"+at)
		if got := textOf(t, ctx, `#dead tbody tr`); !strings.Contains(got, "layout-ttt") {
			t.Errorf("a dead letter's row names no topic%s: %q", at, got)
		}
		run(t, ctx, chromedp.Click(chromedp.CSS(`#dead tbody tr td a`)), chromedp.WaitVisible(chromedp.CSS(`#reason`)))
		noSideways(t, ctx, "a dead letter with long metadata"+at)
		fitsMain(t, ctx, "a dead letter"+at)
		if got := textOf(t, ctx, `dl.detail`); !strings.Contains(got, "layout-ttt") {
			t.Errorf("a dead letter's page names no topic%s: %q", at, got)
		}
		deadID = eval[string](t, ctx, `location.pathname.split("/").pop()`)
		if code, body := do(t, "GET", c.http.URL+"/api/deadletters/"+deadID, ""); code != 200 || !strings.Contains(body, `"topic": "layout-ttt`) {
			t.Errorf("/api/deadletters/%s names no topic: %d %.200s", deadID, code, body)
		}

		// A message's detail with the same metadata.
		run(t, ctx, chromedp.Navigate(c.http.URL+"/queues/"+c.queue+"/messages/"+msgID), chromedp.WaitVisible(chromedp.CSS(`#uuid`)))
		noSideways(t, ctx, "a message with long metadata"+at)
		fitsMain(t, ctx, "a message"+at)
	}
	// The dead letter on an emulated phone (overlay scrollbars, 2x), as
	// docs/console.md shows it.
	run(t, ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(c.http.URL+"/deadletters/"+deadID), chromedp.WaitVisible(chromedp.CSS(`#reason`)))
	noSideways(t, ctx, "a dead letter with long metadata on a phone")
	shoot(t, ctx, "deadletter-phone")

	// A queue's message list, on a phone.
	run(t, ctx, chromedp.EmulateViewport(390, 900))
	run(t, ctx, chromedp.Navigate(c.http.URL+"/queues/"+c.queue+"/messages"), chromedp.WaitReady(chromedp.CSS(`#search`)))
	noSideways(t, ctx, "a queue's messages at 390 px")

	// The reason typed on the queue page reaches the confirmation.
	run(t, ctx, chromedp.EmulateViewport(1280, 900))
	run(t, ctx, chromedp.Navigate(c.http.URL+"/queues/"+layoutQueue), chromedp.WaitVisible(chromedp.CSS(`#pause`)),
		chromedp.SendKeys(chromedp.CSS(`#by`), "deploying v2"),
		chromedp.Click(chromedp.CSS(`#pause`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if got := eval[string](t, ctx, `document.getElementById("by").value`); got != "deploying v2" {
		t.Errorf("the confirmation's reason %q, want the one typed on the queue page", got)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	if got := textOf(t, ctx, `#pause-state`); !strings.Contains(got, "deploying v2") {
		t.Errorf("pause state %q, want the reason", got)
	}
}
