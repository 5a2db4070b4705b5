package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/berth-go/berth/health"
)

// Limits of the health polling (Config.HealthURLs).
const (
	// HealthTimeout bounds one GET of a health endpoint.
	HealthTimeout = 2 * time.Second
	// HealthCacheTTL is how long a round of polls is reused: page loads and
	// API calls within it share one round, however many tabs poll.
	HealthCacheTTL = time.Second
	// MaxHealthResponse caps the body read from a health endpoint.
	MaxHealthResponse = 1 << 20
)

// CheckHealthURL reports whether raw can be one of Config.HealthURLs: an
// absolute http:// or https:// URL.
func CheckHealthURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an absolute http:// or https:// URL, such as http://svc:8081/healthz", raw)
	}
	return nil
}

// checkHealthURLs reports every HealthURLs entry CheckHealthURL refuses.
func checkHealthURLs(us []string) error {
	var errs []error
	for i, raw := range us {
		if err := CheckHealthURL(raw); err != nil {
			errs = append(errs, fmt.Errorf("HealthURLs[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// healthPoll is the outcome of one endpoint's GET.
type healthPoll struct {
	url    string
	report health.Report
	err    error
	at     time.Time // when it was polled, by the console's clock
}

// healthPoller polls the health endpoints on demand, at most once per
// HealthCacheTTL. It starts no goroutine that outlives a call.
type healthPoller struct {
	urls   []string
	client *http.Client
	now    func() time.Time

	mu     sync.Mutex // held through a round: concurrent callers share it
	polled time.Time
	last   []healthPoll
}

func newHealthPoller(urls []string, now func() time.Time) *healthPoller {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &healthPoller{urls: urls, now: now, client: &http.Client{Transport: tr, Timeout: HealthTimeout}}
}

// close drops the poller's idle keep-alive connections.
func (p *healthPoller) close() { p.client.CloseIdleConnections() }

// poll returns every endpoint's latest outcome, in HealthURLs order,
// polling them all concurrently unless the last round is fresh.
func (p *healthPoller) poll(ctx context.Context) []healthPoll {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last != nil && p.now().Sub(p.polled) < HealthCacheTTL {
		return p.last
	}
	out := make([]healthPoll, len(p.urls))
	var wg sync.WaitGroup
	for i, u := range p.urls {
		wg.Go(func() {
			rep, err := p.get(ctx, u)
			out[i] = healthPoll{url: u, report: rep, err: err, at: p.now()}
		})
	}
	wg.Wait()
	if ctx.Err() == nil { // a cancelled page load does not spoil the cache
		p.polled, p.last = p.now(), out
	}
	return out
}

// get reads one endpoint's report. The health handler answers 503 with a
// full report when a listener is unhealthy, so any status with a report
// in the body counts as an answer.
func (p *healthPoller) get(ctx context.Context, u string) (health.Report, error) {
	var rep health.Report
	ctx, cancel := context.WithTimeout(ctx, HealthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return rep, err
	}
	req.Header.Set("Accept", "application/json")
	res, err := p.client.Do(req)
	if err != nil {
		return rep, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, MaxHealthResponse+1))
	if err != nil {
		return rep, fmt.Errorf("HTTP %d: reading the body: %w", res.StatusCode, err)
	}
	if len(body) > MaxHealthResponse {
		return rep, fmt.Errorf("HTTP %d: the response is over %d bytes", res.StatusCode, MaxHealthResponse)
	}
	if err := json.Unmarshal(body, &rep); err != nil || rep.CheckedAt.IsZero() {
		return health.Report{}, fmt.Errorf("HTTP %d: not a health report (want the JSON of a berth health endpoint such as /healthz)", res.StatusCode)
	}
	return rep, nil
}

// healthViews turns the endpoints' reports into the Fleet page's rows:
// one per listener of each service, or one unreachable row for a service
// that did not answer.
func (s *Server) healthViews(ctx context.Context) []listenerView {
	if s.health == nil {
		return nil
	}
	var out []listenerView
	for _, p := range s.health.poll(ctx) {
		host := p.url
		if u, err := url.Parse(p.url); err == nil {
			host = u.Host
		}
		if p.err != nil {
			out = append(out, listenerView{
				Instance: p.url, Host: host, Status: "unreachable", Via: "health", HealthURL: p.url,
				Unreachable: true, Error: p.err.Error(), UpdatedAt: p.at.UTC(),
			})
			continue
		}
		for _, l := range p.report.Listeners {
			v := listenerView{
				Instance: p.url, Name: l.Name, Queue: l.Name, Host: host, Service: l.Source,
				Status: l.Status, Loop: l.Loop, Health: l.Health.String(), Wave: l.Wave,
				Buffered: l.Buffered, InFlight: l.InFlight, BatchPending: l.BatchPending,
				Latched: l.Latched, Faulted: l.Faulted, Rebuilds: l.Rebuilds,
				Via: "health", HealthURL: p.url, UpdatedAt: p.report.CheckedAt.UTC(),
				AgeSecs: max(p.at.Sub(p.report.CheckedAt), 0).Seconds(),
			}
			if l.Fault != nil {
				v.Fault = l.Fault.Cause
				if !l.Fault.At.IsZero() {
					v.FaultAt = l.Fault.At.UTC()
				}
			}
			if !l.LastReceive.IsZero() {
				v.LastReceive = l.LastReceive.UTC()
			}
			if !l.StartedAt.IsZero() {
				v.StartedAt = l.StartedAt.UTC()
			}
			out = append(out, v)
		}
	}
	return out
}
