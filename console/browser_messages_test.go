package console_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/testenv"
)

// Browse a queue's pending messages, search one by UUID, open it, and
// cancel it (asked first, then reported); the purge asks with the count.
func TestBrowserMessages(t *testing.T) {
	for _, kind := range []string{"postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			u := sqliteURL(t)
			if kind == "postgres" {
				u = testenv.PostgresSchemaURL(t)
			}
			c := startConsole(t, u, console.Config{})
			ctx := browser(t, nil)
			rows := `#messages tbody tr[data-id]`
			run(t, ctx, chromedp.Navigate(c.http.URL+"/queues/"+c.queue), chromedp.WaitVisible(chromedp.CSS(`#browse-messages`)),
				chromedp.Click(chromedp.CSS(`#browse-messages`)), chromedp.WaitVisible(chromedp.CSS(rows)))
			if n := eval[int](t, ctx, `document.querySelectorAll("`+rows+`").length`); n != 4 {
				t.Errorf("pending rows: %d, want 4", n)
			}
			if kind == "postgres" {
				shoot(t, ctx, "messages")
			}
			// In flight: shown, never selectable.
			run(t, ctx, chromedp.Click(chromedp.CSS(`#states a:nth-child(3)`)), chromedp.WaitVisible(chromedp.CSS(`#messages tbody tr[data-state="in_flight"]`)))
			if n := eval[int](t, ctx, `document.querySelectorAll("#messages input[type=checkbox]").length`); n != 0 {
				t.Errorf("in-flight page has %d selection boxes", n)
			}
			// Search by UUID among the pending.
			run(t, ctx, chromedp.Click(chromedp.CSS(`#states a:nth-child(1)`)), chromedp.WaitVisible(chromedp.CSS(`#f-uuid`)),
				chromedp.SendKeys(chromedp.CSS(`#f-uuid`), "orders-r2"), chromedp.Click(chromedp.CSS(`#search-button`)),
				chromedp.WaitVisible(chromedp.CSS(`#f-uuid[value="orders-r2"]`)))
			ids := eval[[]string](t, ctx, `[...document.querySelectorAll("`+rows+`")].map(r => r.dataset.id)`)
			if len(ids) != 1 {
				t.Fatalf("search by UUID: rows %v, want one", ids)
			}
			if got := textOf(t, ctx, `#messages tbody tr[data-id="`+ids[0]+`"] code`); got != "orders-r2" {
				t.Errorf("found UUID %q", got)
			}
			// Its detail: body, download.
			run(t, ctx, chromedp.Click(chromedp.CSS(`#messages tbody tr[data-id="`+ids[0]+`"] a`)), chromedp.WaitVisible(chromedp.CSS(`#body`)))
			if got := textOf(t, ctx, `#body`); got != "ready" {
				t.Errorf("body %q", got)
			}
			if got := textOf(t, ctx, `#state`); got != "pending" {
				t.Errorf("state %q", got)
			}
			if eval[string](t, ctx, `document.getElementById("download-body").getAttribute("href")`) == "" {
				t.Error("no download link")
			}
			// Cancel it, from its page: asked, then done.
			run(t, ctx, chromedp.Click(chromedp.CSS(`#cancel-one`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
			if q := textOf(t, ctx, `#question`); !strings.Contains(q, "1 selected message(s) (id "+ids[0]+")") {
				t.Errorf("confirmation %q", q)
			}
			if kind == "postgres" {
				shoot(t, ctx, "cancel-confirm")
			}
			run(t, ctx, chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
			if f := textOf(t, ctx, `#flash`); f != "Cancelled 1 of 1 message(s)." {
				t.Errorf("flash %q", f)
			}
			p, err := c.src.MessagePage(context.Background(), inspect.MessageFilter{Queue: "orders", State: inspect.StateAll}, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range p.Messages {
				if m.UUID == "orders-r2" {
					t.Errorf("orders-r2 still there: %+v", m)
				}
			}
			if len(p.Messages) != 6 {
				t.Errorf("%d messages left, want 6", len(p.Messages))
			}
			// Purge asks with the count (3 pending + 2 delayed), and Back
			// leaves them.
			run(t, ctx, chromedp.Navigate(c.http.URL+"/queues/"+c.queue), chromedp.WaitVisible(chromedp.CSS(`#purge`)),
				chromedp.Click(chromedp.CSS(`#purge`)), chromedp.WaitVisible(chromedp.CSS(`#count`)))
			if got := textOf(t, ctx, `#count`); got != "5" {
				t.Errorf("purge count %q, want 5", got)
			}
			if kind == "postgres" {
				shoot(t, ctx, "purge-confirm")
			}
		})
	}
}
