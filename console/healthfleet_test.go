package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/health"
	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all" // sqs://
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/transporttest"
)

// HealthURLs must be absolute http(s) URLs; New names each bad one.
func TestConfigHealthURLs(t *testing.T) {
	src := open(t, sqliteURL(t))
	_, err := console.New(console.Config{Source: src, HealthURLs: []string{"svc:8081/healthz", "ftp://svc/healthz", "/healthz", "http://%zz"}})
	if !errors.Is(err, console.ErrInvalidConfig) {
		t.Fatalf("New with bad health URLs: %v", err)
	}
	for _, want := range []string{"HealthURLs[0]", "HealthURLs[1]", "HealthURLs[2]", "HealthURLs[3]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	if _, err := console.New(console.Config{Source: src, HealthURLs: []string{"http://svc:8081/healthz", "https://svc.example/x/healthz"}}); err != nil {
		t.Fatalf("good health URLs refused: %v", err)
	}
}

// sqsFleet is a console over an SQS deployment that is given the health
// endpoints of a service (one SQS listener, accepting; one listener whose
// source's Claim panicked, faulted) and two that give no report.
type sqsFleet struct {
	console          string // the console's base URL
	service          string // the service's health URL
	down, huge       string // a closed server's URL; one serving over 1 MiB
	healthy, faulted string // the listeners' names
}

func startSQSFleet(t *testing.T) sqsFleet {
	t.Helper()
	c := testenv.SQSConfig(t)
	e, err := url.Parse(c.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	sqsURL := "sqs://" + c.AccessKeyID + ":" + c.SecretAccessKey + "@" + e.Host + "?region=" + c.Region
	ctx := context.Background()
	f := sqsFleet{healthy: testenv.UniqueName("orders"), faulted: "invoices"}

	// The service: an SQS subscriber, and a pipeline over a SQLite
	// source whose Claim panics, both
	// watched by the real health handler.
	sub, err := transport.OpenSubscriber(ctx, sqsURL+"&create=true&wait_time=1s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	subCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if _, err := sub.Subscribe(subCtx, f.healthy); err != nil {
		t.Fatal(err)
	}
	db, closer, err := sqlite.Open(filepath.Join(t.TempDir(), "svc.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	cfg := sqlqueue.SubscriberConfig{DB: db}
	cfg.Pipeline.CheckInterval = time.Minute
	// Every Claim panics, so the listener is faulted again at once should
	// anything rebuild it while the test looks.
	inj := transporttest.NewFaults().Panic(transporttest.AtReceive, math.MaxInt32)
	rsub, err := receiver.NewSubscriber(func(ctx context.Context, topic string) (transport.Source, error) {
		src, err := sqlqueue.NewSource(ctx, sqlite.Dialect{}, cfg, topic, nil)
		if err != nil {
			return nil, err
		}
		return transporttest.FaultySource(src, inj), nil
	}, receiver.SubscriberConfig{Pipeline: cfg.Pipeline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rsub.Close() })
	if _, err := rsub.Subscribe(ctx, f.faulted); err != nil {
		t.Fatal(err)
	}
	h, err := health.NewHandler(health.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddSource("orders", sub); err != nil {
		t.Fatal(err)
	}
	if err := h.AddSource("billing", rsub); err != nil {
		t.Fatal(err)
	}
	svc := httptest.NewServer(h)
	t.Cleanup(svc.Close)
	f.service = svc.URL + "/healthz"

	dead := httptest.NewServer(http.NotFoundHandler())
	f.down = dead.URL + "/healthz"
	dead.Close()
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"listeners":[` + strings.Repeat(" ", 1<<20) + `]}`))
	}))
	t.Cleanup(huge.Close)
	f.huge = huge.URL + "/healthz"

	src, err := inspect.OpenSQS(ctx, sqsURL)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := console.New(console.Config{Source: src, Kind: "sqs", HealthURLs: []string{f.service, f.down, f.huge}, Refresh: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Close(cctx); err != nil {
			t.Error(err)
		}
	})
	f.console = hs.URL
	return f
}

type fleetRow struct {
	Instance, Name, Status, Fault, Via, Service, Error, Health string
	HealthURL                                                  string `json:"health_url"`
	Faulted, Unreachable                                       bool
	Loop                                                       string `json:"loop_state"`
}

// fleetRows reads /api/fleet.
func fleetRows(t *testing.T, base, query string) map[string]fleetRow {
	t.Helper()
	code, body := do(t, "GET", base+"/api/fleet"+query, "")
	var got struct{ Listeners []fleetRow }
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("/api/fleet: %d %s", code, body)
	}
	out := map[string]fleetRow{}
	for _, l := range got.Listeners {
		out[l.Instance+" "+l.Name] = l
	}
	return out
}

// On SQS the fleet comes from the services' health endpoints: /api/fleet
// and the Fleet page list each listener of the service with its state, the
// faulted one with its cause, and the endpoints that give no report as
// unreachable with the reason.
func TestFleetFromHealthEndpoints(t *testing.T) {
	f := startSQSFleet(t)
	var rows map[string]fleetRow
	waitCond(t, "the faulted and the accepting listener", func() bool {
		rows = fleetRows(t, f.console, "")
		return rows[f.service+" "+f.faulted].Faulted && rows[f.service+" "+f.healthy].Status == "accepting"
	})
	if len(rows) != 4 {
		t.Errorf("want 4 rows (2 listeners, 2 unreachable), got %+v", rows)
	}
	bad := rows[f.service+" "+f.faulted]
	if bad.Status != "faulted" || !strings.Contains(bad.Fault, "injected") || bad.Via != "health" || bad.Service != "billing" || bad.Health != "unhealthy" {
		t.Errorf("faulted listener %+v", bad)
	}
	if ok := rows[f.service+" "+f.healthy]; ok.Faulted || ok.Service != "orders" || ok.HealthURL != f.service || ok.Loop != "running" {
		t.Errorf("SQS listener %+v", ok)
	}
	if d := rows[f.down+" "]; !d.Unreachable || d.Status != "unreachable" || d.Error == "" {
		t.Errorf("closed endpoint %+v", d)
	}
	if d := rows[f.huge+" "]; !d.Unreachable || !strings.Contains(d.Error, "over") {
		t.Errorf("oversized endpoint %+v", d)
	}
	if got := fleetRows(t, f.console, "?q=unreachable"); len(got) != 2 {
		t.Errorf("filter unreachable: %+v", got)
	}

	code, body := do(t, "GET", f.console+"/fleet", "")
	if code != 200 || !strings.Contains(body, `href="/fleet"`) || !strings.Contains(body, "injected") || !strings.Contains(body, "2 unreachable") {
		t.Fatalf("fleet page: %d %s", code, body)
	}
	// SQS offers no pause, health URLs or not.
	if code, body := do(t, "GET", f.console+"/queues", ""); code != 200 || strings.Contains(body, `id="pause-`) {
		t.Errorf("SQS queue list offers pause: %d", code)
	}
}

// The Fleet page of an SQS console shows the faulted listener as faulted,
// with its cause, next to the accepting SQS listener and an unreachable
// service.
func TestBrowserFleetHealthEndpoints(t *testing.T) {
	f := startSQSFleet(t)
	var rows map[string]fleetRow
	deadline := time.Now().Add(30 * time.Second)
	for rows = fleetRows(t, f.console, ""); !rows[f.service+" "+f.faulted].Faulted; rows = fleetRows(t, f.console, "") {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the faulted listener; rows %+v", rows)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not synchronising
	}
	ctx := browser(t, nil)
	row := `#fleet tr[data-name^="` + f.faulted + ` "]`
	run(t, ctx, chromedp.Navigate(f.console+"/fleet"), chromedp.WaitVisible(chromedp.CSS(row)))
	if got := textOf(t, ctx, row+` [data-status]`); got != "faulted" {
		t.Errorf("faulted listener's status badge %q", got)
	}
	if got := eval[string](t, ctx, `document.querySelector('`+row+` [data-field="fault"]').textContent`); !strings.Contains(got, "injected") {
		t.Errorf("fault text %q", got)
	}
	waitTrue(t, ctx, `document.querySelector('#fleet tr[data-name^="`+f.healthy+` "] [data-status]').textContent === "accepting"`)
	if got := textOf(t, ctx, `#summary`); !strings.Contains(got, "1 faulted") || !strings.Contains(got, "2 unreachable") {
		t.Errorf("summary %q", got)
	}
}
