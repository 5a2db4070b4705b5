package console_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/transporttest"
)

var screenshots = flag.String("console.screenshots", "", "write PNG screenshots of the console's pages into this directory")

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// browser starts a headless chromium with a fresh profile and returns a
// tab's context, with basic credentials sent on every request when hdr is
// given, and any extra options (command-line flags). It skips when
// chromium is missing, or fails under CI=true.
func browser(t *testing.T, hdr map[string]any, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("browser tests are not short")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		if testenv.InCI() {
			t.Fatalf("chromium is required under CI=true but %s is missing (scripts/services.sh installs it: apt-get install chromium)", chromiumPath)
		}
		t.Skipf("skipping: no browser at %s; install it with `apt-get install chromium` (as root), or run `make test`", chromiumPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	}
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc() // waits for the browser process to exit
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if hdr != nil {
		if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers(hdr)}); err != nil {
			t.Fatal(err)
		}
	}
	return ctx
}

func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitTrue polls expr in the page until it is true.
func waitTrue(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("waiting for %s: %v", expr, err)
	}
}

// shoot saves a screenshot of the page as docs/console/NAME.png when
// -console.screenshots is set.
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if *screenshots == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(*screenshots, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*screenshots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// The queue list shows the seeded counts of a PostgreSQL and a SQLite
// queue, and follows them live (without a reload) when they change.
func TestBrowserQueueCounts(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			u := sqliteURL(t)
			if kind == "postgres" {
				u = testenv.PostgresSchemaURL(t)
			}
			c := startConsole(t, u, console.Config{Refresh: 200 * time.Millisecond})
			ctx := browser(t, nil)
			row := `tr[data-queue="` + c.queue + `"] `
			run(t, ctx, chromedp.Navigate(c.http.URL+"/queues"), chromedp.WaitVisible(chromedp.CSS(row)))
			for field, want := range map[string]string{"ready": "4", "in_flight": "1", "delayed": "2", "dead_lettered": "4"} {
				if got := textOf(t, ctx, row+`[data-field="`+field+`"]`); got != want {
					t.Errorf("%s: %s = %q, want %q", kind, field, got, want)
				}
			}
			shoot(t, ctx, "queues-"+kind)
			// A replay behind the page's back: the counts follow.
			if _, err := c.src.Replay(context.Background(), inspect.Filter{Reason: "poison"}, false); err != nil {
				t.Fatal(err)
			}
			waitTrue(t, ctx, `document.querySelector('`+row+`[data-field="ready"]').textContent === "5"`)
			// The queue page and its history chart.
			c.srv.SampleNow(context.Background())
			run(t, ctx, chromedp.Navigate(c.http.URL+"/queues/"+c.queue), chromedp.WaitVisible(chromedp.CSS(`#history`)))
			waitTrue(t, ctx, `document.getElementById("history").complete && document.getElementById("history").naturalWidth > 0`)
			if got := textOf(t, ctx, `dd[data-field="dead_lettered"]`); got != "3" {
				t.Errorf("queue page dead-lettered = %q, want 3", got)
			}
			if kind == "sqlite" {
				shoot(t, ctx, "queue")
			}
		})
	}
}

// Browse, detail, replay of selected rows (exactly those move back), and
// delete with confirmation.
func TestBrowserDeadLetters(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{})
	ctx := browser(t, nil)
	run(t, ctx, chromedp.Navigate(c.http.URL+"/deadletters"), chromedp.WaitVisible(chromedp.CSS(`#dead tbody tr[data-id]`)))
	shoot(t, ctx, "deadletters")

	// The detail of the first: reason, metadata, JSON body.
	run(t, ctx, chromedp.Click(chromedp.CSS(`#dead tbody tr[data-id="1"] a`)), chromedp.WaitVisible(chromedp.CSS(`#body`)))
	if got := textOf(t, ctx, `#reason`); got != "nacked on attempt 5 of 5 (MaxAttempts)" {
		t.Errorf("detail reason %q", got)
	}
	if got := textOf(t, ctx, `#body`); !strings.Contains(got, `"sku": "A-1"`) {
		t.Errorf("detail body %q, want indented JSON", got)
	}
	if got := textOf(t, ctx, `table.meta`); !strings.Contains(got, "trace") {
		t.Errorf("metadata %q", got)
	}
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll("#attempt-errors tbody tr")].map(r => r.innerText.replace(/\s+/g, " ").trim())`)
	if len(rows) != 4 || !strings.HasPrefix(rows[0], "1 ") || !strings.HasSuffix(rows[0], "payments: gateway timeout after 10s") ||
		!strings.HasSuffix(rows[2], "no reason recorded") || !strings.HasSuffix(rows[3], "503 Service Unavailable") {
		t.Errorf("earlier attempts %q", rows)
	}
	shoot(t, ctx, "deadletter")
	run(t, ctx, chromedp.Navigate(c.http.URL+"/deadletters/3"), chromedp.WaitVisible(chromedp.CSS(`#body`)))
	if got := textOf(t, ctx, `#body`); !strings.Contains(got, "00 01 62 69") {
		t.Errorf("binary body %q, want hex", got)
	}

	// Replay dead letters 2 and 4: select, ask, confirm.
	run(t, ctx, chromedp.Navigate(c.http.URL+"/deadletters"), chromedp.WaitVisible(chromedp.CSS(`#sel-2`)),
		chromedp.Click(chromedp.CSS(`#sel-2`)), chromedp.Click(chromedp.CSS(`#sel-4`)),
		chromedp.Click(chromedp.CSS(`#replay-selected`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if q := textOf(t, ctx, `#question`); !strings.Contains(q, "2 selected dead letter(s) (id 2, 4)") {
		t.Errorf("confirmation %q", q)
	}
	shoot(t, ctx, "confirm")
	run(t, ctx, chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	if f := textOf(t, ctx, `#flash`); f != "Replayed 2 dead letter(s)." {
		t.Errorf("flash %q", f)
	}
	ids := eval[[]string](t, ctx, `[...document.querySelectorAll("#dead tbody tr[data-id]")].map(r => r.dataset.id)`)
	if strings.Join(ids, ",") != "1,3" {
		t.Errorf("rows after replay %v, want 1,3", ids)
	}
	stats, _ := c.src.Queues(context.Background())
	if stats[1].Ready != 6 || stats[1].DeadLettered != 2 {
		t.Errorf("after replaying 2: %+v", stats[1])
	}

	// Delete dead letter 3, confirmed from its detail page.
	run(t, ctx, chromedp.Navigate(c.http.URL+"/deadletters/3"), chromedp.WaitVisible(chromedp.CSS(`#delete-one`)),
		chromedp.Click(chromedp.CSS(`#delete-one`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if q := textOf(t, ctx, `#question`); !strings.Contains(q, "Delete") || !strings.Contains(q, "for good") {
		t.Errorf("delete confirmation %q", q)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	if f := textOf(t, ctx, `#flash`); f != "Deleted 1 dead letter(s)." {
		t.Errorf("flash %q", f)
	}
	if ds, _ := c.src.DeadLetters(context.Background(), inspect.Filter{}, 0); len(ds) != 1 || ds[0].ID != "1" {
		t.Errorf("left after the delete: %+v", ds)
	}
}

// A read-only console shows no action and no selection box: no replay,
// delete, pause or resume.
func TestBrowserReadOnly(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{ReadOnly: true})
	ctx := browser(t, nil)
	for _, page := range []string{"/deadletters", "/deadletters/1", "/queues", "/queues/" + c.queue, "/fleet"} {
		run(t, ctx, chromedp.Navigate(c.http.URL+page), chromedp.WaitVisible(chromedp.CSS(`#read-only`)))
		n := eval[int](t, ctx, `document.querySelectorAll("button[formaction], input[type=checkbox], form[method=post]").length`)
		if n != 0 {
			t.Errorf("%s: %d action controls on a read-only console", page, n)
		}
	}
}

// Without credentials the browser gets 401 and no data; with them, the
// pages.
func TestBrowserAuth(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{Auth: console.Auth{Token: "s3cret"}})
	ctx := browser(t, nil)
	run(t, ctx, chromedp.Navigate(c.http.URL+"/queues"), chromedp.WaitReady(chromedp.CSS("body")))
	body := textOf(t, ctx, "body")
	if !strings.Contains(body, "401 unauthorized") || strings.Contains(body, c.queue) {
		t.Fatalf("without credentials: %q", body)
	}
	ctx = browser(t, map[string]any{"Authorization": "Bearer s3cret"})
	run(t, ctx, chromedp.Navigate(c.http.URL+"/queues"), chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="`+c.queue+`"]`)))
}

// The pages on a phone-sized screen, in dark mode.
func TestBrowserPhoneDark(t *testing.T) {
	c := startConsole(t, sqliteURL(t), console.Config{})
	ctx := browser(t, nil)
	if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
	}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(c.http.URL+"/queues"), chromedp.WaitVisible(chromedp.CSS(`#queues`)))
	if bg := eval[string](t, ctx, `getComputedStyle(document.body).backgroundColor`); bg != "rgb(13, 17, 23)" {
		t.Errorf("dark background = %s", bg)
	}
	if eval[bool](t, ctx, `document.documentElement.scrollWidth > window.innerWidth`) {
		t.Errorf("the queues page scrolls sideways on a phone")
	}
	shoot(t, ctx, "queues-phone-dark")
	run(t, ctx, chromedp.Navigate(c.http.URL+"/deadletters"), chromedp.WaitVisible(chromedp.CSS(`#dead`)))
	shoot(t, ctx, "deadletters-phone-dark")
}

// fleetSub starts a subscriber on rawURL's PostgreSQL schema that reports
// to the fleet tables every 100ms and counts (and acks) what it handles of
// topic; it is closed at cleanup.
func fleetSub(t *testing.T, rawURL, topic string, handled *atomic.Int64, mut func(*sqlqueue.SubscriberConfig)) *sqlqueue.Subscriber {
	t.Helper()
	db, err := postgres.Open(rawURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sqlqueue.SubscriberConfig{DB: db, FleetInterval: 100 * time.Millisecond, Closer: db}
	cfg.Pipeline.EmptyDelay = 50 * time.Millisecond
	cfg.Pipeline.DrainTimeout = 5 * time.Second
	if mut != nil {
		mut(&cfg)
	}
	sub, err := sqlqueue.NewSubscriber(postgres.Dialect{}, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for m := range ch {
			handled.Add(1)
			m.Ack()
		}
	}()
	return sub
}

func publish(t *testing.T, rawURL, topic string, n int) {
	t.Helper()
	db, err := postgres.Open(rawURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pub, err := sqlqueue.NewPublisher(postgres.Dialect{}, sqlqueue.PublisherConfig{DB: db}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i := range n {
		if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
}

// waitCond polls cond (a Go-side condition: a subscriber's state, a row
// count) until it holds.
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not synchronising
	}
}

// The Fleet page shows a listener whose source's Claim panics as faulted,
// with the fault's text.
func TestBrowserFleetFaulted(t *testing.T) {
	u := testenv.PostgresSchemaURL(t)
	c := startConsole(t, u, console.Config{Refresh: 200 * time.Millisecond})
	var healthy atomic.Int64
	// The faulted listener: a pipeline over a source whose every Claim
	// panics, reported by a FleetReporter (a listener faulted once can be
	// rebuilt to accepting before a loaded machine looks).
	db, err := postgres.Open(u, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	cfg := sqlqueue.SubscriberConfig{DB: db, FleetInterval: 100 * time.Millisecond}
	cfg.Pipeline.CheckInterval = time.Minute
	inj := transporttest.NewFaults().Panic(transporttest.AtReceive, 1<<30)
	rsub, err := receiver.NewSubscriber(func(ctx context.Context, topic string) (transport.Source, error) {
		src, err := sqlqueue.NewSource(ctx, postgres.Dialect{}, cfg, topic, nil)
		if err != nil {
			return nil, err
		}
		return transporttest.FaultySource(src, inj), nil
	}, receiver.SubscriberConfig{Pipeline: cfg.Pipeline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rsub.Close() })
	rep, err := sqlqueue.NewFleetReporter(postgres.Dialect{}, cfg, sqlqueue.ReceiverMember(rsub), nil)
	if err != nil {
		t.Fatal(err)
	}
	rep.Start()
	t.Cleanup(func() { _ = rep.Close() })
	if _, err := rsub.Subscribe(context.Background(), "invoices_of_the_accounting_department_in_eu_west_1"); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "a faulted report", func() bool {
		ls, _, err := c.src.Listeners(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(ls) == 1 && ls[0].Faulted
	})
	fleetSub(t, u, "emails", &healthy, nil)
	waitCond(t, "the healthy listener's report", func() bool {
		ls, _, err := c.src.Listeners(context.Background())
		return err == nil && len(ls) == 2
	})
	ctx := browser(t, nil)
	row := `#fleet tr[data-name^="invoices_of_the_accounting_department_in_eu_west_1 "]`
	run(t, ctx, chromedp.Navigate(c.http.URL+"/fleet"), chromedp.WaitVisible(chromedp.CSS(row)))
	if got := textOf(t, ctx, row+` [data-status]`); got != "faulted" {
		t.Errorf("faulted listener's status badge %q", got)
	}
	if got := eval[string](t, ctx, `document.querySelector('`+row+` [data-field="fault"]').textContent`); !strings.Contains(got, "injected") {
		t.Errorf("fault text %q", got)
	}
	if got := textOf(t, ctx, `#fleet tr[data-name^="emails "] [data-status]`); got != "accepting" {
		t.Errorf("healthy listener's status %q", got)
	}
	if got := textOf(t, ctx, `#summary`); !strings.Contains(got, "2 listener(s)") || !strings.Contains(got, "1 faulted") {
		t.Errorf("summary %q", got)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(row+` details summary`)))
	// In a 1280 px window (main is at most 1200 px) every column shows
	// without scrolling the table, and the fault's text wraps in lines of
	// at least 30 characters, not a handful.
	for _, w := range []int64{1280, 390} {
		run(t, ctx, chromedp.EmulateViewport(w, 900))
		noSideways(t, ctx, fmt.Sprintf("/fleet at %d px", w))
		if w != 1280 {
			continue
		}
		sw, cw := eval[int](t, ctx, `document.getElementById("fleet").scrollWidth`), eval[int](t, ctx, `document.getElementById("fleet").parentElement.clientWidth`)
		t.Logf("fleet table at %d px: %d px in %d px", w, sw, cw)
		if sw > cw {
			t.Errorf("the fleet table needs %d px in %d px: columns fall off", sw, cw)
		}
		if ch := eval[float64](t, ctx, `(p => p.getBoundingClientRect().width / (parseFloat(getComputedStyle(p).fontSize) * 0.6))(document.querySelector('`+row+` [data-field="fault"]'))`); ch < 30 {
			t.Errorf("the fault's text wraps at about %.0f characters", ch)
		}
	}
	run(t, ctx, chromedp.EmulateViewport(1200, 900))
	// Names wrap between their words (after '_', '.', '-', ':'), not
	// inside one: each character that starts a new line follows one.
	midWord := eval[[]string](t, ctx, `(() => {
		const bad = [];
		for (const el of document.querySelectorAll("#fleet tbody th[scope=row], #fleet tbody td:nth-child(2) a")) {
			const w = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
			let top = null, prev = "", n;
			while ((n = w.nextNode())) {
				for (let i = 0; i < n.length; i++) {
					const r = document.createRange();
					r.setStart(n, i);
					r.setEnd(n, i + 1);
					const b = r.getBoundingClientRect();
					if (b.width === 0) continue;
					if (top !== null && Math.abs(b.top - top) > 2 && !"_.-: ".includes(prev)) bad.push(el.textContent + " before " + n.data.slice(i, i + 8));
					top = b.top;
					prev = n.data[i];
				}
			}
		}
		return bad;
	})()`)
	if len(midWord) > 0 {
		t.Errorf("names break inside a word at 1200 px: %q", midWord)
	}
	shoot(t, ctx, "fleet")
	// Filtering as you type keeps the faulted one only.
	run(t, ctx, chromedp.SendKeys(chromedp.CSS(`#q`), "faulted"))
	waitTrue(t, ctx, `document.querySelector('#fleet tr[data-name^="emails "]').hidden`)
}

// Pause from the queue page stops a running subscriber from claiming: it
// releases what it holds, and messages published meanwhile stay pending
// through several reporting intervals; resume from the queue list drains
// them.
func TestBrowserPauseResume(t *testing.T) {
	u := testenv.PostgresSchemaURL(t)
	c := startConsole(t, u, console.Config{Refresh: 200 * time.Millisecond})
	var handled atomic.Int64
	sub := fleetSub(t, u, "jobs", &handled, nil)
	publish(t, u, "jobs", 5)
	waitCond(t, "the first 5 messages", func() bool { return handled.Load() == 5 })
	queue := sub.Queue("jobs").Name

	ctx := browser(t, nil)
	run(t, ctx, chromedp.Navigate(c.http.URL+"/queues/"+queue), chromedp.WaitVisible(chromedp.CSS(`#pause`)),
		chromedp.SendKeys(chromedp.CSS(`#by`), "browser test"),
		chromedp.Click(chromedp.CSS(`#pause`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if q := textOf(t, ctx, `#question`); !strings.Contains(q, "Pause "+queue) {
		t.Errorf("confirmation %q", q)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	if f := textOf(t, ctx, `#flash`); !strings.HasPrefix(f, "Paused queue "+queue) {
		t.Errorf("flash %q", f)
	}
	if got := textOf(t, ctx, `#pause-state`); !strings.Contains(got, "paused fleet-wide") {
		t.Errorf("pause state %q", got)
	}
	waitCond(t, "the listener paused with nothing buffered", func() bool {
		for _, st := range sub.ListenerStates() {
			if st.Status != transport.StatusPaused || st.Buffered != 0 {
				return false
			}
		}
		return true
	})
	publish(t, u, "jobs", 5)
	ticks := sub.FleetStats().Ticks
	waitCond(t, "three more reporting intervals", func() bool { return sub.FleetStats().Ticks >= ticks+3 })
	if got := handled.Load(); got != 5 {
		t.Fatalf("%d messages handled while paused", got-5)
	}
	// The queue list says paused and offers resume.
	btn := `#resume-` + queue
	run(t, ctx, chromedp.Navigate(c.http.URL+"/queues"), chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="`+queue+`"]`)))
	if eval[bool](t, ctx, `document.querySelector('tr[data-queue="`+queue+`"] [data-field="paused"]').hidden`) {
		t.Error("the queue list does not show the queue paused")
	}
	if got := textOf(t, ctx, `tr[data-queue="`+queue+`"] [data-field="ready"]`); got != "5" {
		t.Errorf("pending while paused %q, want 5", got)
	}
	shoot(t, ctx, "queues-paused")
	run(t, ctx, chromedp.Click(chromedp.CSS(btn)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
		chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	if f := textOf(t, ctx, `#flash`); !strings.HasPrefix(f, "Resumed queue "+queue) {
		t.Errorf("flash %q", f)
	}
	waitCond(t, "the 5 messages published while paused", func() bool { return handled.Load() == 10 })
	// The list follows live: the paused badge goes.
	waitTrue(t, ctx, `document.querySelector('tr[data-queue="`+queue+`"] [data-field="paused"]').hidden`)
}
