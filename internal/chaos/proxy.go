package chaos

import (
	"bytes"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// TCPProxy forwards TCP connections from a loopback port to a target and
// injects network faults between them: latency, resets, blackholes (stalled
// traffic that ends in a reset) and a kill that refuses every connection
// until the proxy is closed.
type TCPProxy struct {
	target string
	ln     net.Listener

	latency atomic.Int64 // nanoseconds added before each forwarded chunk
	stalled atomic.Bool  // blackhole: forward nothing
	killed  atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// NewTCPProxy listens on 127.0.0.1 on a free port and forwards to target
// (host:port).
func NewTCPProxy(target string) (*TCPProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &TCPProxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *TCPProxy) Addr() string { return p.ln.Addr().String() }

func (p *TCPProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.killed.Load() {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, up) {
			continue
		}
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *TCPProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil { // closed
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *TCPProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for p.stalled.Load() && !p.killed.Load() {
				time.Sleep(5 * time.Millisecond) // a blackhole holds the bytes
			}
			if p.killed.Load() {
				return
			}
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// SetLatency delays every forwarded chunk by d (0 removes it).
func (p *TCPProxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Reset closes every open connection (both sides see a reset or EOF).
func (p *TCPProxy) Reset() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns) / 2
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN
		}
		_ = c.Close()
	}
	return n
}

// Stall starts (true) or ends (false) a blackhole: bytes are accepted and
// held. Ending a stall resets the held connections, as a middlebox that
// timed them out would.
func (p *TCPProxy) Stall(on bool) {
	p.stalled.Store(on)
	if !on {
		p.Reset()
	}
}

// Refuse starts (true) or ends (false) an outage of the server behind the
// proxy: new connections are closed at once and the open ones reset, as a
// database that went down (or a firewall that rejects) does.
func (p *TCPProxy) Refuse(on bool) {
	p.killed.Store(on)
	if on {
		p.Reset()
	}
}

// Kill refuses every new connection and resets the open ones, for good: the
// process behind it is gone.
func (p *TCPProxy) Kill() {
	p.killed.Store(true)
	p.Reset()
}

// Close stops the proxy and waits for its goroutines. Idempotent.
func (p *TCPProxy) Close() error {
	p.once.Do(func() {
		p.killed.Store(true)
		_ = p.ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
		p.mu.Unlock()
		p.wg.Wait()
	})
	return nil
}

// HTTPFault is what an HTTPProxy does to a request during a fault.
type HTTPFault int

// The HTTP faults.
const (
	HTTPOK       HTTPFault = iota // forward
	HTTP5xx                       // 500/503 with an AWS JSON error body
	HTTPThrottle                  // 400 ThrottlingException
	HTTPTimeout                   // hold the request, then 504
	HTTPFreeze                    // hold the request until the fault ends, then forward: a frozen broker
)

// HTTPProxy is a reverse proxy in front of an HTTP API (the SQS emulator)
// that injects 5xx and throttling responses, latency and timeouts at a
// rate, and refuses everything once killed.
type HTTPProxy struct {
	srv    *http.Server
	ln     net.Listener
	rp     *httputil.ReverseProxy
	wg     sync.WaitGroup
	once   sync.Once
	stopCh chan struct{}

	mu      sync.Mutex
	fault   HTTPFault
	rate    float64 // share of requests that get fault
	latency time.Duration
	rnd     func() float64
	killed  bool

	Injected atomic.Int64 // requests answered with a fault
}

// NewHTTPProxy serves on a free 127.0.0.1 port and forwards to target.
func NewHTTPProxy(target string, rnd func() float64) (*HTTPProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &HTTPProxy{ln: ln, rnd: rnd, stopCh: make(chan struct{})}
	p.rp = httputil.NewSingleHostReverseProxy(u)
	p.rp.ErrorLog = log.New(io.Discard, "", 0)
	p.rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// URL is the proxy's base URL.
func (p *HTTPProxy) URL() string { return "http://" + p.ln.Addr().String() }

// Set makes a share rate of requests get fault, each after latency.
func (p *HTTPProxy) Set(fault HTTPFault, rate float64, latency time.Duration) {
	p.mu.Lock()
	p.fault, p.rate, p.latency = fault, rate, latency
	p.mu.Unlock()
}

// Kill makes every request fail at the connection: the process behind the
// proxy is gone.
func (p *HTTPProxy) Kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	p.srv.SetKeepAlivesEnabled(false)
}

// ServeHTTP forwards r to the target, or injects the fault in force.
func (p *HTTPProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	fault, rate, latency, killed := p.fault, p.rate, p.latency, p.killed
	hit := fault != HTTPOK && p.rnd() < rate
	p.mu.Unlock()
	if killed {
		// Hijack and drop the connection: the client sees a reset.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
				return
			}
		}
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-p.stopCh:
		case <-r.Context().Done():
			return
		}
	}
	if hit && fault == HTTPFreeze {
		p.Injected.Add(1)
		// Read the body first: the server then watches the connection and
		// cancels r's context when the client gives up, so a request whose
		// client left is dropped at the thaw, not forwarded (a long poll
		// forwarded for nobody would hide what it takes).
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !p.thaw(r) {
			return
		}
		hit = false
	}
	if !hit {
		p.rp.ServeHTTP(w, r)
		return
	}
	p.Injected.Add(1)
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	switch fault {
	case HTTP5xx:
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"__type":"com.amazonaws.sqs#ServiceUnavailable","message":"chaos: injected 503"}`)
	case HTTPThrottle:
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"__type":"com.amazonaws.sqs#ThrottlingException","message":"chaos: injected throttling"}`)
	case HTTPTimeout:
		select {
		case <-time.After(3 * time.Second):
		case <-p.stopCh:
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusGatewayTimeout)
	}
}

// thaw waits until the freeze ends; false when the proxy or the request
// ended first.
func (p *HTTPProxy) thaw(r *http.Request) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		p.mu.Lock()
		frozen := p.fault == HTTPFreeze
		p.mu.Unlock()
		if !frozen {
			return true
		}
		select {
		case <-t.C:
		case <-p.stopCh:
			return false
		case <-r.Context().Done():
			return false
		}
	}
}

// Close stops the proxy. Idempotent.
func (p *HTTPProxy) Close() error {
	var err error
	p.once.Do(func() {
		close(p.stopCh)
		err = p.srv.Close()
		p.wg.Wait()
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	})
	return err
}
