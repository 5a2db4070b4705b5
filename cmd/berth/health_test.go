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
	pr, pw := newPipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--messages", "1000", "--rate", "50"}, pw, pw)
		pw.Close()
	}()
	line := pr.waitFor(t, "health: ")
	addr := strings.Fields(strings.TrimPrefix(line, "health: "))[0]
	addr = strings.TrimSuffix(addr, "/healthz")
	out := mustRun(t, "health", "--addr", addr)
	if !strings.Contains(out, "demo_orders") {
		t.Fatalf("health of the demo:\n%s", out)
	}
	cancel()
	<-done
}
