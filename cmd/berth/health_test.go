package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/health"
	"github.com/berth-go/berth/transport"
)

func healthServer(t *testing.T, states ...transport.ListenerState) string {
	t.Helper()
	h, err := health.NewHandler(health.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddSource("orders", health.SourceFunc(func() []transport.ListenerState { return states })); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestHealthHealthy(t *testing.T) {
	now := time.Now()
	addr := healthServer(t, transport.ListenerState{Name: "orders.created", Status: transport.StatusAccepting, Loop: transport.LoopRunning, LastReceive: now, StartedAt: now, Wave: 4, QueueCount: 7})
	out := mustRun(t, "health", "--addr", addr)
	for _, want := range []string{"healthy (HTTP 200)", "orders.created", "ok", "accepting"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	out = mustRun(t, "health", "--addr", addr+"/readyz", "--json")
	if !strings.Contains(out, `"ready": true`) {
		t.Fatalf("--json:\n%s", out)
	}
}

func TestHealthUnhealthy(t *testing.T) {
	now := time.Now()
	addr := healthServer(t, transport.ListenerState{Name: "orders.created", Status: transport.StatusFaulted, Faulted: true, Fault: "panic: boom", FaultAt: now, StartedAt: now})
	code, out, errs := runCmd(t, "health", "--addr", addr)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "faulted") || !strings.Contains(out, "panic: boom") || !strings.Contains(errs, "unhealthy") {
		t.Fatalf("output:\n%s\nstderr: %s", out, errs)
	}
}

func TestHealthOfRunningDemo(t *testing.T) {
	// The demo's own endpoint answers while it runs: start it with a slow
	// rate and query it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newRecorder()
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"demo", "--messages", "1000", "--rate", "50"}, out, out) }()
	line := out.waitFor(t, "health: ")
	addr := strings.TrimSuffix(strings.Fields(strings.TrimPrefix(line, "health: "))[0], "/healthz")
	if want := "health: " + addr + "/healthz  (try: berth health --addr " + addr + " while it runs, or run with --hold 1m)"; line != want {
		t.Fatalf("health line:\n%s\nwant:\n%s", line, want)
	}
	got := mustRun(t, "health", "--addr", addr)
	if !strings.Contains(got, "demo_orders") {
		t.Fatalf("health of the demo:\n%s", got)
	}
	cancel()
	<-done
}

// With --hold the hint can be followed after the run: the service stays up,
// idle, until the hold ends or Ctrl-C (exit 0 either way).
func TestDemoHoldKeepsHealthUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newRecorder()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--url", "mem://hold", "--messages", "20", "--rate", "2000", "--hold", "10m"}, out, out)
	}()
	line := out.waitFor(t, "health: ")
	addr := strings.TrimSuffix(strings.Fields(strings.TrimPrefix(line, "health: "))[0], "/healthz")
	if want := "health: " + addr + "/healthz  (try: berth health --addr " + addr + "; up until 10m0s after the run)"; line != want {
		t.Fatalf("health line:\n%s\nwant:\n%s", line, want)
	}
	line = out.waitFor(t, "holding for ")
	if want := "holding for 10m0s (Ctrl-C ends it): berth health --addr " + addr; line != want {
		t.Fatalf("hold line:\n%s\nwant:\n%s", line, want)
	}
	if !strings.Contains(out.String(), "\nlost                       0\n") {
		t.Fatalf("the summary comes before the hold:\n%s", out)
	}
	got := mustRun(t, "health", "--addr", addr)
	for _, want := range []string{addr + "/healthz: healthy (HTTP 200), live true, ready true", "demo_orders ", "demo_orders_audit "} {
		if !strings.Contains(got, want) {
			t.Fatalf("health during the hold lacks %q:\n%s", want, got)
		}
	}
	cancel() // Ctrl-C
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after Ctrl-C during the hold, want 0:\n%s", code, out)
	}
	if l := out.waitFor(t, "stopped in "); !strings.HasSuffix(l, "s") {
		t.Fatalf("last line: %q", l)
	}
}
