package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-go/berth/transport"
)

// Handler is an http.Handler serving three endpoints, matched on the last
// element of the request path so the handler can be mounted under any
// prefix:
//
//   - /livez: liveness. 503 when a listener failed liveness (a fault not
//     rebuilt within Config.FaultGrace), else 200. Pingers are not called:
//     a broker outage must not make an orchestrator restart the process.
//   - /readyz: readiness. 503 when a listener is not ready or a ping
//     failed, else 200.
//   - /healthz: the full report. 503 when the overall health is
//     Unhealthy, 200 when Healthy or Degraded.
//
// Every endpoint answers GET and HEAD with the JSON of a Report. A Handler is
// safe for concurrent use; sources and pingers may be added at any time. It
// reports state; it never logs.
type Handler struct {
	eval evaluator

	mu      sync.RWMutex
	names   map[string]bool
	sources []namedSource
	pingers []namedPinger
}

type namedSource struct {
	name string
	src  Source
}

type namedPinger struct {
	name string
	p    Pinger
}

// NewHandler returns a Handler watching nothing yet; add sources with
// AddSource and connectivity checks with AddPinger. The startup grace of
// listeners that have not started yet runs from now.
func NewHandler(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	return &Handler{
		eval:  evaluator{cfg: cfg, created: cfg.Clock.Now()},
		names: make(map[string]bool),
	}, nil
}

// AddSource watches the listeners of src under name (a subscriber's role,
// such as "orders"). Names are unique across sources and pingers; an empty
// or taken name, or a nil src, is an error wrapping
// transport.ErrInvalidConfig.
func (h *Handler) AddSource(name string, src Source) error {
	if src == nil {
		return fmt.Errorf("health: %w: source %q is nil", transport.ErrInvalidConfig, name)
	}
	return h.add(name, func() { h.sources = append(h.sources, namedSource{name, src}) })
}

// AddPinger adds a broker connectivity check under name, called on /readyz
// and /healthz with a timeout of Config.PingTimeout. Names are unique across
// sources and pingers; an empty or taken name, or a nil p, is an error
// wrapping transport.ErrInvalidConfig.
func (h *Handler) AddPinger(name string, p Pinger) error {
	if p == nil {
		return fmt.Errorf("health: %w: pinger %q is nil", transport.ErrInvalidConfig, name)
	}
	return h.add(name, func() { h.pingers = append(h.pingers, namedPinger{name, p}) })
}

func (h *Handler) add(name string, do func()) error {
	if name == "" {
		return fmt.Errorf("health: %w: empty name", transport.ErrInvalidConfig)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.names[name] {
		return fmt.Errorf("health: %w: name %q already registered", transport.ErrInvalidConfig, name)
	}
	h.names[name] = true
	do()
	return nil
}

// Report evaluates every source and calls every pinger (concurrently,
// waiting for all of them). It is what /healthz and /readyz serve.
func (h *Handler) Report(ctx context.Context) Report {
	return h.report(ctx, true)
}

func (h *Handler) report(ctx context.Context, ping bool) Report {
	h.mu.RLock()
	sources := slices.Clone(h.sources)
	pingers := slices.Clone(h.pingers)
	h.mu.RUnlock()

	now := h.eval.cfg.Clock.Now()
	r := Report{Health: Healthy, Live: true, Ready: true, CheckedAt: now, Listeners: []ListenerReport{}}
	for _, s := range sources {
		r.Listeners = append(r.Listeners, h.eval.source(s.name, s.src, now)...)
	}
	if ping {
		r.Pings = h.ping(ctx, pingers)
	}
	r.aggregate()
	return r
}

// source reports the listeners of one source, sorted by name.
func (e *evaluator) source(name string, src Source, now time.Time) []ListenerReport {
	states, err := listenerStates(src)
	if err != nil {
		return []ListenerReport{{
			Source: name, Health: Unhealthy, Reason: ReasonStateUnavailable, Live: true,
			Status: "unknown", Loop: "unknown", LastError: err.Error(),
		}}
	}
	out := make([]ListenerReport, 0, len(states))
	for _, s := range states {
		out = append(out, e.listener(name, s, now))
	}
	slices.SortStableFunc(out, func(a, b ListenerReport) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func listenerStates(src Source) (states []transport.ListenerState, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("health: ListenerStates panicked: %v", p)
		}
	}()
	return src.ListenerStates(), nil
}

func (h *Handler) ping(ctx context.Context, pingers []namedPinger) []PingReport {
	out := make([]PingReport, len(pingers))
	var wg sync.WaitGroup
	for i, np := range pingers {
		wg.Go(func() {
			clock := h.eval.cfg.Clock
			ctx, cancel := context.WithTimeout(ctx, h.eval.cfg.PingTimeout)
			defer cancel()
			start := clock.Now()
			err := callPing(ctx, np.p)
			out[i] = PingReport{
				Name:       np.name,
				Health:     Healthy,
				Reason:     ReasonOK,
				DurationMS: float64(clock.Now().Sub(start).Microseconds()) / 1000,
			}
			if err != nil {
				out[i].Health, out[i].Reason, out[i].Error = Unhealthy, ReasonPingFailed, err.Error()
			}
		})
	}
	wg.Wait()
	return out
}

func callPing(ctx context.Context, p Pinger) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("health: Ping panicked: %v", r)
		}
	}()
	return p.Ping(ctx)
}

// aggregate sets the overall verdict from the parts.
func (r *Report) aggregate() {
	for _, l := range r.Listeners {
		r.Health = max(r.Health, l.Health)
		r.Live = r.Live && l.Live
		r.Ready = r.Ready && l.Ready
	}
	for _, p := range r.Pings {
		r.Health = max(r.Health, p.Health)
		r.Ready = r.Ready && p.Health != Unhealthy
	}
}

// ReadyError returns nil when r is ready, else an error wrapping ErrNotReady
// that names every listener that is not ready and every failed ping.
func (r Report) ReadyError() error {
	if r.Ready {
		return nil
	}
	var errs []error
	for _, l := range r.Listeners {
		if !l.Ready {
			errs = append(errs, l.err())
		}
	}
	for _, p := range r.Pings {
		if p.Health == Unhealthy {
			errs = append(errs, fmt.Errorf("%s: %s: %s", p.Name, p.Reason, p.Error))
		}
	}
	return fmt.Errorf("%w: %w", ErrNotReady, errors.Join(errs...))
}

// LiveError returns nil when r is live, else an error wrapping ErrNotLive
// that names every listener that failed liveness.
func (r Report) LiveError() error {
	if r.Live {
		return nil
	}
	var errs []error
	for _, l := range r.Listeners {
		if !l.Live {
			errs = append(errs, l.err())
		}
	}
	return fmt.Errorf("%w: %w", ErrNotLive, errors.Join(errs...))
}

func (l ListenerReport) err() error {
	msg := l.Source + "/" + l.Name + ": " + string(l.Reason)
	switch {
	case l.Fault != nil && l.Fault.Cause != "":
		msg += ": " + l.Fault.Cause
	case l.LastError != "":
		msg += ": " + l.LastError
	}
	return errors.New(msg)
}

// ServeHTTP serves /livez, /readyz and /healthz (matched on the last path
// element); any other path is 404, any method but GET and HEAD is 405.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	endpoint := path.Base(r.URL.Path)
	if endpoint != "livez" && endpoint != "readyz" && endpoint != "healthz" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var rep Report
	var ok bool
	switch endpoint {
	case "livez":
		rep = h.report(r.Context(), false)
		ok = rep.Live
	case "readyz":
		rep = h.report(r.Context(), true)
		ok = rep.Ready
	default:
		rep = h.report(r.Context(), true)
		ok = rep.Health != Unhealthy
	}
	body, err := json.MarshalIndent(rep, "", "  ")
	if err != nil { // cannot happen: every field marshals
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
