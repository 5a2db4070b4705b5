package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/berth-go/berth/internal/inspect"
)

// FleetSource is a Source that also keeps the fleet tables (the listeners
// running subscribers report, and the queues paused fleet-wide):
// *inspect.SQL. With one, the console shows the Fleet page and pause and
// resume actions; without (SQS), no pause, and a Fleet page only with
// Config.HealthURLs.
type FleetSource interface {
	// Listeners returns the reported listeners and the database's clock.
	Listeners(ctx context.Context) ([]inspect.Listener, time.Time, error)
	// Pause pauses a queue fleet-wide and reports its table and whether
	// it was not paused already.
	Pause(ctx context.Context, name, by string) (string, bool, error)
	// Resume undoes Pause, and reports whether the queue was paused.
	Resume(ctx context.Context, name string) (string, bool, error)
}

var _ FleetSource = (*inspect.SQL)(nil)

// StaleIntervals is how many of its own reporting intervals a listener's
// row may age before the fleet page shows it as stale (its process is
// gone, stuck, or cut off from the database).
const StaleIntervals = 3

func (s *Server) fleet() FleetSource {
	f, _ := s.cfg.Source.(FleetSource)
	return f
}

// listenerView is one listener as the Fleet page and API show it.
type listenerView struct {
	Instance     string    `json:"instance"`
	Name         string    `json:"name"`
	Queue        string    `json:"queue"`
	Host         string    `json:"host"`
	PID          int       `json:"pid"`
	Status       string    `json:"status"`
	Loop         string    `json:"loop_state"`
	Wave         int       `json:"wave"`
	Buffered     int       `json:"buffered"`
	InFlight     int       `json:"in_flight"`
	BatchPending int       `json:"batch_pending"`
	Latched      bool      `json:"latched"`
	Faulted      bool      `json:"faulted"`
	Fault        string    `json:"fault,omitempty"`
	FaultAt      time.Time `json:"fault_at,omitzero"`
	Rebuilds     int64     `json:"rebuilds"`
	LastReceive  time.Time `json:"last_receive,omitzero"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	// IntervalSecs is the reporting interval; AgeSecs how long ago the
	// row was written, by the database's clock; Stale is AgeSecs over
	// StaleIntervals intervals.
	IntervalSecs float64   `json:"interval_seconds"`
	UpdatedAt    time.Time `json:"updated_at"`
	AgeSecs      float64   `json:"age_seconds"`
	Stale        bool      `json:"stale"`
	// Paused is true when the queue is paused fleet-wide (the listener may
	// not have seen it yet: compare Status).
	QueuePaused bool `json:"queue_paused"`

	// Via says where the row comes from: "table" (the SQL fleet tables)
	// or "health" (a service's health endpoint, Config.HealthURLs; then
	// Instance and HealthURL are the endpoint's URL, Service the name
	// the source was registered with, Health its verdict, and UpdatedAt
	// the service's CheckedAt).
	Via       string `json:"via"`
	HealthURL string `json:"health_url,omitempty"`
	Service   string `json:"service,omitempty"`
	Health    string `json:"health,omitempty"`
	// Unreachable is a health endpoint that did not answer with a report;
	// Error says why. Such a row has no listener name.
	Unreachable bool   `json:"unreachable,omitempty"`
	Error       string `json:"error,omitempty"`
}

// Key identifies the row in the page.
func (l listenerView) Key() string { return l.Instance + " " + l.Name }

// Age is the row's staleness as the table shows it.
func (l listenerView) Age() string { return age(time.Duration(l.AgeSecs * float64(time.Second))) }

// FaultAgo is how long ago the fault was recorded.
func (l listenerView) FaultAgo() string { return age(time.Since(l.FaultAt)) }

func toListenerView(r inspect.Listener, now time.Time, paused map[string]bool) listenerView {
	v := listenerView{
		Instance: r.Instance, Name: r.Name, Queue: r.Queue, Host: r.Host, PID: r.PID,
		Status: r.Status, Loop: r.Loop, Wave: r.Wave, Buffered: r.Buffered, InFlight: r.InFlight,
		BatchPending: r.BatchPending, Latched: r.Latched, Faulted: r.Faulted, Fault: r.Fault,
		Rebuilds: r.Rebuilds, IntervalSecs: r.Interval.Seconds(), UpdatedAt: r.UpdatedAt.UTC(),
		AgeSecs: max(now.Sub(r.UpdatedAt), 0).Seconds(), QueuePaused: paused[r.Queue], Via: "table",
	}
	if !r.FaultAt.IsZero() {
		v.FaultAt = r.FaultAt.UTC()
	}
	if !r.LastReceive.IsZero() {
		v.LastReceive = r.LastReceive.UTC()
	}
	if !r.StartedAt.IsZero() {
		v.StartedAt = r.StartedAt.UTC()
	}
	v.Stale = r.Interval > 0 && now.Sub(r.UpdatedAt) > StaleIntervals*r.Interval
	return v
}

var errNoFleet = fmt.Errorf("%w: this transport keeps no fleet tables and the console was given no health URLs (SQS: see docs/console.md, Fleet)", errNotFound)

// hasFleetPage reports whether the Fleet page exists: the source keeps
// the fleet tables, or the console polls health endpoints.
func (s *Server) hasFleetPage() bool { return s.fleet() != nil || s.health != nil }

// fleetViews reads the listeners from the fleet tables and the health
// endpoints, filtered by q (name, queue, host, instance, status, service
// or state) and sorted by key.
func (s *Server) fleetViews(ctx context.Context, q, key string, desc bool) ([]listenerView, error) {
	if !s.hasFleetPage() {
		return nil, errNoFleet
	}
	var all []listenerView
	if f := s.fleet(); f != nil {
		rows, now, err := f.Listeners(ctx)
		if err != nil {
			return nil, err
		}
		paused := map[string]bool{}
		if p, ok := s.cfg.Source.(interface {
			Paused(context.Context) ([]inspect.PausedQueue, error)
		}); ok {
			ps, err := p.Paused(ctx)
			if err != nil {
				return nil, err
			}
			for _, q := range ps {
				paused[q.Queue] = true
			}
		}
		for _, r := range rows {
			all = append(all, toListenerView(r, now, paused))
		}
	}
	all = append(all, s.healthViews(ctx)...)
	out := make([]listenerView, 0, len(all))
	sub := strings.ToLower(strings.TrimSpace(q))
	for _, v := range all {
		hay := strings.ToLower(strings.Join([]string{v.Name, v.Queue, v.Host, v.Instance, v.Status, v.Service, stateWords(v)}, " "))
		if sub == "" || strings.Contains(hay, sub) {
			out = append(out, v)
		}
	}
	return out, sortListeners(out, key, desc)
}

// stateWords are the badges a filter can match ("stale", "latched"…).
func stateWords(v listenerView) string {
	var w []string
	for word, on := range map[string]bool{"stale": v.Stale, "latched": v.Latched, "faulted": v.Faulted, "paused": v.QueuePaused, "unreachable": v.Unreachable} {
		if on {
			w = append(w, word)
		}
	}
	return strings.Join(w, " ")
}

// sortListeners sorts by key (name, queue, host, status, age, buffered,
// in_flight, rebuilds), descending with desc; an unknown key is a bad
// request.
func sortListeners(ls []listenerView, key string, desc bool) error {
	text := map[string]func(l listenerView) string{
		"name": func(l listenerView) string { return l.Name }, "queue": func(l listenerView) string { return l.Queue },
		"host": func(l listenerView) string { return l.Host }, "status": func(l listenerView) string { return l.Status },
	}
	num := map[string]func(l listenerView) float64{
		"age": func(l listenerView) float64 { return l.AgeSecs }, "buffered": func(l listenerView) float64 { return float64(l.Buffered) },
		"in_flight": func(l listenerView) float64 { return float64(l.InFlight) }, "rebuilds": func(l listenerView) float64 { return float64(l.Rebuilds) },
	}
	var cmp func(a, b listenerView) int
	switch {
	case key == "":
		cmp = func(a, b listenerView) int { return strings.Compare(a.Queue, b.Queue) }
	case text[key] != nil:
		f := text[key]
		cmp = func(a, b listenerView) int { return strings.Compare(f(a), f(b)) }
	case num[key] != nil:
		f := num[key]
		cmp = func(a, b listenerView) int { return compare(f(a), f(b)) }
	default:
		return badInput("sort=%q: want name, queue, host, status, age, buffered, in_flight or rebuilds", key)
	}
	slices.SortStableFunc(ls, func(a, b listenerView) int {
		c := cmp(a, b)
		if c == 0 {
			c = strings.Compare(a.Key(), b.Key())
		}
		if desc {
			return -c
		}
		return c
	})
	return nil
}

func (s *Server) apiFleet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ls, err := s.fleetViews(r.Context(), q.Get("q"), q.Get("sort"), q.Get("desc") != "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"listeners": ls, "stale_intervals": StaleIntervals})
}

func (s *Server) fleetPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := sortState{Q: q.Get("q"), Key: q.Get("sort"), Desc: q.Get("desc") != ""}
	if st.Key == "" {
		st.Key = "queue"
	}
	ls, err := s.fleetViews(r.Context(), st.Q, st.Key, st.Desc)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var faulted, latched, stale, unreachable int
	for _, l := range ls {
		if l.Unreachable {
			unreachable++
		}
		if l.Faulted {
			faulted++
		}
		if l.Latched {
			latched++
		}
		if l.Stale {
			stale++
		}
	}
	s.render(w, r, "fleet", "Fleet", "fleet", map[string]any{
		"Listeners": ls, "Sort": st, "Faulted": faulted, "Latched": latched, "Stale": stale, "Unreachable": unreachable, "StaleIntervals": StaleIntervals,
	})
}

// pauseResult reports a pause or resume.
type pauseResult struct {
	Action  string `json:"action"`
	Queue   string `json:"queue"`
	Changed bool   `json:"changed"` // false: it already was (not) paused
}

func (s *Server) pause(ctx context.Context, action, name, by string) (pauseResult, error) {
	if s.cfg.ReadOnly {
		return pauseResult{}, errReadOnly
	}
	f := s.fleet()
	if f == nil {
		return pauseResult{}, errNoFleet
	}
	res := pauseResult{Action: action}
	if err := checkName("queue", name); err != nil {
		return res, err
	}
	if err := checkText("by", by); err != nil {
		return res, err
	}
	var err error
	switch action {
	case "pause":
		if by == "" {
			by = "berth console"
		}
		res.Queue, res.Changed, err = f.Pause(ctx, name, by)
	case "resume":
		res.Queue, res.Changed, err = f.Resume(ctx, name)
	default:
		return res, fmt.Errorf("%w: no action %q (want pause or resume)", errNotFound, action)
	}
	return res, err
}

// apiPause is POST /api/queues/{name}/{pause,resume}, with an optional
// body {"by": "who or why"}.
func (s *Server) apiPause(w http.ResponseWriter, r *http.Request) {
	var req struct {
		By string `json:"by"`
	}
	if err := decodeJSON(w, r, 1<<16, &req); err != nil && !errors.Is(err, io.EOF) {
		s.fail(w, r, badInput("body is not {\"by\": \"…\"}: %v", err))
		return
	}
	res, err := s.pause(r.Context(), r.PathValue("action"), r.PathValue("name"), req.By)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// pausePage handles the pause and resume forms: without confirm=yes it
// asks; with it, it acts and redirects to the page it came from with the
// outcome.
func (s *Server) pausePage(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, badInput("form: %v", err))
		return
	}
	action, name := r.PathValue("action"), r.PathValue("name")
	if s.cfg.ReadOnly {
		s.fail(w, r, errReadOnly)
		return
	}
	if action != "pause" && action != "resume" {
		s.fail(w, r, fmt.Errorf("%w: no action %q", errNotFound, action))
		return
	}
	back := s.url("/queues/" + url.PathEscape(name))
	if r.PostForm.Get("back") == "list" {
		back = s.url("/queues")
	}
	if r.PostForm.Get("confirm") != "yes" {
		if _, err := s.findQueue(r.Context(), name); err != nil {
			s.fail(w, r, err)
			return
		}
		s.render(w, r, "pauseconfirm", "Confirm "+action, "queues", map[string]any{
			"Action": action, "Queue": name, "Back": back, "List": r.PostForm.Get("back") == "list",
			"By": r.PostForm.Get("by"), // typed on the queue page: kept, still editable
		})
		return
	}
	res, err := s.pause(r.Context(), action, name, r.PostForm.Get("by"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := url.Values{}
	q.Set("done", map[string]string{"pause": "paused", "resume": "resumed"}[action])
	q.Set("queue", res.Queue)
	if !res.Changed {
		q.Set("already", "1")
	}
	http.Redirect(w, r, back+"?"+q.Encode(), http.StatusSeeOther)
}

// pauseFlash is the message of a finished pause or resume.
func pauseFlash(q url.Values) string {
	done, queue := q.Get("done"), q.Get("queue")
	if (done != "paused" && done != "resumed") || queue == "" {
		return ""
	}
	if q.Get("already") != "" {
		return fmt.Sprintf("Queue %s was already %s.", queue, done)
	}
	if done == "paused" {
		return fmt.Sprintf("Paused queue %s: its listeners release their prefetched messages and stop claiming within one reporting interval.", queue)
	}
	return fmt.Sprintf("Resumed queue %s: its listeners claim again within one reporting interval.", queue)
}
