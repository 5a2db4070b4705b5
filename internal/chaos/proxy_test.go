package chaos

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func TestTCPProxyForwardsResetsAndKills(t *testing.T) {
	p, err := NewTCPProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	_, _ = c.Write([]byte("ping\n"))
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo: %q %v", line, err)
	}
	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset closed %d connections, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("read after reset succeeded")
	}
	p.Kill()
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c2.Read(make([]byte, 1)); err == nil {
			t.Fatal("a killed proxy forwarded a connection")
		}
		_ = c2.Close()
	}
}

func TestHTTPProxyInjects(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	p, err := NewHTTPProxy(srv.URL, func() float64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	status := func() int {
		resp, err := client.Get(p.URL())
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	if s := status(); s != 200 {
		t.Fatalf("forwarded status %d", s)
	}
	p.Set(HTTP5xx, 1, 0)
	if s := status(); s != 503 {
		t.Fatalf("5xx fault: status %d", s)
	}
	p.Set(HTTPThrottle, 1, 0)
	if s := status(); s != 400 {
		t.Fatalf("throttle fault: status %d", s)
	}
	p.Set(HTTPOK, 0, 0)
	p.Kill()
	if s := status(); s != -1 {
		t.Fatalf("killed proxy answered %d", s)
	}
	if p.Injected.Load() != 2 {
		t.Fatalf("Injected = %d, want 2", p.Injected.Load())
	}
}
