package health

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-go/berth/transport"
)

type fixture struct {
	clock *fakeClock
	src   *fakeSource
	h     *Handler
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	f := &fixture{clock: newClock(), src: &fakeSource{}}
	cfg.Clock = f.clock
	h, err := NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	if err := h.AddSource("orders", f.src); err != nil {
		t.Fatal(err)
	}
	// The handler was created at t0; move past the startup grace.
	f.clock.Advance(10 * time.Minute)
	return f
}

// get serves one request and decodes the report.
func get(t *testing.T, h http.Handler, path string) (int, Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s: Content-Type %q", path, ct)
	}
	var r Report
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, rec.Body)
	}
	return rec.Code, r
}

// codes returns the status codes of /livez, /readyz, /healthz.
func codes(t *testing.T, h http.Handler) [3]int {
	t.Helper()
	var c [3]int
	for i, p := range []string{"/livez", "/readyz", "/healthz"} {
		c[i], _ = get(t, h, p)
	}
	return c
}

const (
	ok  = http.StatusOK
	bad = http.StatusServiceUnavailable
)

func TestHandlerCodes(t *testing.T) {
	f := newFixture(t, Config{})
	now := f.clock.Now()
	faulted := accepting("orders.created", now)
	faulted.Status, faulted.Loop, faulted.Faulted = transport.StatusFaulted, transport.LoopFaulted, true
	faulted.Fault, faulted.FaultAt = "deliver: panic: boom", now.Add(-time.Second)
	paused := accepting("orders.created", now)
	paused.Status = transport.StatusPaused
	busy := accepting("orders.created", now)
	busy.Status, busy.Latched = transport.StatusTooBusy, true
	missing := accepting("orders.created", now)
	missing.QueueMissing = true
	stopped := accepting("orders.created", now)
	stopped.Status = transport.StatusStopped

	tests := []struct {
		name   string
		states []transport.ListenerState
		want   [3]int // livez, readyz, healthz
		health Status
	}{
		{"no listeners", nil, [3]int{ok, ok, ok}, Healthy},
		{"healthy", []transport.ListenerState{accepting("orders.created", now)}, [3]int{ok, ok, ok}, Healthy},
		{"too busy", []transport.ListenerState{busy}, [3]int{ok, ok, ok}, Degraded},
		{"paused", []transport.ListenerState{paused}, [3]int{ok, bad, ok}, Degraded},
		{"faulted", []transport.ListenerState{faulted}, [3]int{ok, bad, bad}, Unhealthy},
		{"queue missing", []transport.ListenerState{missing}, [3]int{ok, bad, bad}, Unhealthy},
		{"stopped", []transport.ListenerState{stopped}, [3]int{ok, bad, bad}, Unhealthy},
		{"worst of several", []transport.ListenerState{accepting("a", now), busy, faulted}, [3]int{ok, bad, bad}, Unhealthy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.src.Set(tt.states...)
			if got := codes(t, f.h); got != tt.want {
				t.Errorf("codes = %v, want %v", got, tt.want)
			}
			_, r := get(t, f.h, "/healthz")
			if r.Health != tt.health {
				t.Errorf("health = %v, want %v", r.Health, tt.health)
			}
			if len(r.Listeners) != len(tt.states) {
				t.Errorf("%d listeners, want %d", len(r.Listeners), len(tt.states))
			}
		})
	}
}

// TestHandlerFaultLifecycle follows a fault: readiness fails at once,
// liveness only after FaultGrace, and both recover once the watchdog has
// rebuilt the receiver.
func TestHandlerFaultLifecycle(t *testing.T) {
	f := newFixture(t, Config{FaultGrace: 30 * time.Second})
	s := accepting("orders.created", f.clock.Now())
	f.src.Set(s)
	if got := codes(t, f.h); got != [3]int{ok, ok, ok} {
		t.Fatalf("before the fault: %v", got)
	}

	s.Status, s.Loop, s.Faulted, s.Fault, s.FaultAt = transport.StatusFaulted, transport.LoopFaulted, true, "ack: panic: boom", f.clock.Now()
	f.src.Set(s)
	if got := codes(t, f.h); got != [3]int{ok, bad, bad} {
		t.Fatalf("just faulted: %v", got)
	}
	_, r := get(t, f.h, "/healthz")
	l := r.Listeners[0]
	if !l.Faulted || l.Fault == nil || l.Fault.Cause != "ack: panic: boom" || !l.Fault.At.Equal(s.FaultAt) || l.Reason != ReasonFaulted {
		t.Fatalf("faulted listener: %+v", l)
	}

	f.clock.Advance(31 * time.Second)
	if got := codes(t, f.h); got != [3]int{bad, bad, bad} {
		t.Fatalf("fault not rebuilt: %v", got)
	}
	_, r = get(t, f.h, "/livez")
	if r.Live || r.Listeners[0].Reason != ReasonFaultNotRebuilt {
		t.Fatalf("livez report: %+v", r)
	}

	// The watchdog rebuilds: the fault clears, rebuilds counts, the last
	// fault is still reported (as receiver.Listener.State does).
	faultAt := s.FaultAt
	s = accepting("orders.created", f.clock.Now())
	s.Rebuilds, s.Fault, s.FaultAt = 1, "ack: panic: boom", faultAt
	f.src.Set(s)
	if got := codes(t, f.h); got != [3]int{ok, ok, ok} {
		t.Fatalf("after the rebuild: %v", got)
	}
	_, r = get(t, f.h, "/healthz")
	if l := r.Listeners[0]; l.Faulted || l.Reason != ReasonOK || l.Rebuilds != 1 ||
		l.Fault == nil || l.Fault.Cause != "ack: panic: boom" || !l.Fault.At.Equal(faultAt) {
		t.Fatalf("rebuilt listener: %+v", l)
	}
}

// TestHandlerStartup: a listener that has not received yet is not reported
// unhealthy during the startup grace.
func TestHandlerStartup(t *testing.T) {
	clock := newClock()
	h, err := NewHandler(Config{Clock: clock, StartupGrace: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{}
	if err := h.AddSource("orders", src); err != nil {
		t.Fatal(err)
	}
	src.Set(transport.ListenerState{Name: "orders.created"}) // registered, not started
	if got := codes(t, h); got != [3]int{ok, bad, ok} {
		t.Fatalf("not started, in grace: %v", got)
	}
	clock.Advance(5 * time.Second)
	src.Set(transport.ListenerState{Name: "orders.created", Status: transport.StatusAccepting, StartedAt: clock.Now()})
	if got := codes(t, h); got != [3]int{ok, bad, ok} {
		t.Fatalf("started, not received: %v", got)
	}
	clock.Advance(21 * time.Second)
	if got := codes(t, h); got != [3]int{ok, bad, bad} {
		t.Fatalf("never received after the grace: %v", got)
	}
	src.Set(transport.ListenerState{Name: "orders.created", Status: transport.StatusAccepting,
		StartedAt: clock.Now().Add(-26 * time.Second), LastReceive: clock.Now()})
	if got := codes(t, h); got != [3]int{ok, ok, ok} {
		t.Fatalf("receiving: %v", got)
	}
}

func TestHandlerPings(t *testing.T) {
	f := newFixture(t, Config{})
	f.src.Set(accepting("orders.created", f.clock.Now()))
	var calls atomic.Int32
	var fail atomic.Bool
	db := PingFunc(func(ctx context.Context) error {
		calls.Add(1)
		if fail.Load() {
			return errors.New("connection refused")
		}
		return nil
	})
	if err := f.h.AddPinger("postgres", db); err != nil {
		t.Fatal(err)
	}
	if got := codes(t, f.h); got != [3]int{ok, ok, ok} {
		t.Fatalf("ping ok: %v", got)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("pinged %d times for livez+readyz+healthz, want 2 (not on livez)", n)
	}
	fail.Store(true)
	if got := codes(t, f.h); got != [3]int{ok, bad, bad} {
		t.Fatalf("ping failing: %v", got)
	}
	_, r := get(t, f.h, "/readyz")
	if len(r.Pings) != 1 || r.Pings[0].Name != "postgres" || r.Pings[0].Health != Unhealthy ||
		r.Pings[0].Reason != ReasonPingFailed || r.Pings[0].Error != "connection refused" {
		t.Fatalf("pings: %+v", r.Pings)
	}
	_, r = get(t, f.h, "/livez")
	if r.Pings != nil {
		t.Errorf("livez reported pings: %+v", r.Pings)
	}
	err := f.h.Report(context.Background()).ReadyError()
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "postgres: ping_failed: connection refused") {
		t.Errorf("ReadyError = %v", err)
	}
}

func TestHandlerPingTimeoutAndPanic(t *testing.T) {
	f := newFixture(t, Config{PingTimeout: 20 * time.Millisecond})
	// Waits for its context, as a network call does.
	if err := f.h.AddPinger("sqs", PingFunc(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})); err != nil {
		t.Fatal(err)
	}
	if err := f.h.AddPinger("broken", PingFunc(func(context.Context) error { panic("nil client") })); err != nil {
		t.Fatal(err)
	}
	r := f.h.Report(context.Background())
	if r.Ready || r.Health != Unhealthy || len(r.Pings) != 2 {
		t.Fatalf("report: %+v", r)
	}
	if p := r.Pings[0]; p.Name != "sqs" || !strings.Contains(p.Error, context.DeadlineExceeded.Error()) {
		t.Errorf("timed-out ping: %+v", p)
	}
	if p := r.Pings[1]; p.Name != "broken" || !strings.Contains(p.Error, "nil client") {
		t.Errorf("panicking ping: %+v", p)
	}
}

func TestHandlerSourcePanics(t *testing.T) {
	f := newFixture(t, Config{})
	if err := f.h.AddSource("broken", SourceFunc(func() []transport.ListenerState { panic("boom") })); err != nil {
		t.Fatal(err)
	}
	f.src.Set(accepting("orders.created", f.clock.Now()))
	if got := codes(t, f.h); got != [3]int{ok, bad, bad} {
		t.Fatalf("codes: %v", got)
	}
	_, r := get(t, f.h, "/healthz")
	if len(r.Listeners) != 2 || r.Listeners[1].Source != "broken" || r.Listeners[1].Reason != ReasonStateUnavailable {
		t.Fatalf("listeners: %+v", r.Listeners)
	}
}

func TestHandlerRouting(t *testing.T) {
	f := newFixture(t, Config{})
	f.src.Set(accepting("orders.created", f.clock.Now()))

	mux := http.NewServeMux()
	mux.Handle("/ops/", f.h)
	for _, p := range []string{"/ops/livez", "/ops/readyz", "/ops/healthz"} {
		if code, _ := get(t, mux, p); code != ok {
			t.Errorf("GET %s: %d", p, code)
		}
	}

	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/statusz", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /statusz: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/readyz", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /readyz: %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}
	rec = httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/readyz", nil))
	if rec.Code != ok || rec.Body.Len() != 0 || rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("HEAD /readyz: %d, body %d bytes, Cache-Control %q", rec.Code, rec.Body.Len(), rec.Header().Get("Cache-Control"))
	}

	// Over a real server too.
	srv := httptest.NewServer(f.h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != ok {
		t.Errorf("server GET /readyz: %d", resp.StatusCode)
	}
}

// TestHandlerJSONFields pins the JSON documented in docs/operations.md.
func TestHandlerJSONFields(t *testing.T) {
	f := newFixture(t, Config{})
	s := accepting("orders.created", f.clock.Now())
	s.Faulted, s.Fault, s.FaultAt, s.LastError = true, "nack: panic", f.clock.Now(), "timeout"
	f.src.Set(s)
	if err := f.h.AddPinger("postgres", PingFunc(func(context.Context) error { return errors.New("down") })); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var doc struct {
		Top       map[string]any
		Listeners []map[string]any `json:"listeners"`
		Pings     []map[string]any `json:"pings"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc.Top); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
	check := func(what string, got []string, want ...string) {
		t.Helper()
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s keys = %q, want %q", what, got, want)
		}
	}
	check("report", keys(doc.Top), "health", "live", "ready", "checked_at", "listeners", "pings")
	check("listener", keys(doc.Listeners[0]), "source", "name", "health", "reason", "live", "ready", "status", "loop",
		"queue_count", "buffered", "in_flight", "batch_pending", "latched", "faulted", "fault", "rebuilds",
		"last_receive", "last_contact", "contact_failing", "consecutive_failures", "last_error", "queue_missing", "wave", "started_at")
	check("fault", keys(doc.Listeners[0]["fault"].(map[string]any)), "cause", "at")
	check("ping", keys(doc.Pings[0]), "name", "health", "reason", "error", "duration_ms")

	// Optional fields are omitted when empty.
	f.src.Set(transport.ListenerState{Name: "q"})
	f.h = mustHandler(t, Config{Clock: f.clock})
	if err := f.h.AddSource("orders", f.src); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/livez", nil))
	doc.Top, doc.Listeners, doc.Pings = nil, nil, nil
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc.Top); err != nil {
		t.Fatal(err)
	}
	check("livez report", keys(doc.Top), "health", "live", "ready", "checked_at", "listeners")
	check("zero listener", keys(doc.Listeners[0]), "source", "name", "health", "reason", "live", "ready", "status", "loop",
		"queue_count", "buffered", "in_flight", "batch_pending", "latched", "faulted", "rebuilds",
		"contact_failing", "consecutive_failures", "queue_missing", "wave")
}

func mustHandler(t *testing.T, cfg Config) *Handler {
	t.Helper()
	h, err := NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestNewHandlerErrors(t *testing.T) {
	_, err := NewHandler(Config{PingTimeout: -time.Second})
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "PingTimeout") {
		t.Errorf("NewHandler(bad) = %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	h := mustHandler(t, Config{})
	src := &fakeSource{}
	if err := h.AddSource("orders", src); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"duplicate source":         h.AddSource("orders", src),
		"source named as a pinger": h.AddPinger("orders", PingFunc(func(context.Context) error { return nil })),
		"empty name":               h.AddSource("", src),
		"nil source":               h.AddSource("x", nil),
		"nil pinger":               h.AddPinger("y", nil),
	} {
		if !errors.Is(err, transport.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestHandlerConcurrent registers sources while probes are served (run with
// -race).
func TestHandlerConcurrent(t *testing.T) {
	f := newFixture(t, Config{})
	f.src.Set(accepting("orders.created", f.clock.Now()))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				if i == 0 {
					name := "extra-" + string(rune('a'+j%26)) + string(rune('a'+j/26))
					if err := f.h.AddSource(name, f.src); err != nil {
						t.Error(err)
					}
					continue
				}
				rec := httptest.NewRecorder()
				f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
				if rec.Code != ok {
					t.Errorf("healthz: %d", rec.Code)
				}
			}
		})
	}
	wg.Wait()
}
