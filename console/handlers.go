package console

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berth-go/berth/internal/bench/chart"
	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/transport"
)

// Handler returns the console's pages, API and assets behind the
// authentication guard.
//
// Its routes answer under Config.Prefix; mount it there as is (the handler
// strips the prefix itself), inside the service's own middleware if any:
//
//	mux.Handle("/ops/berth/", auth(srv.Handler()))
//
// GET <prefix>/healthz is the console's own health: 200 "ok" when the
// Source's database answers a ping within 2 s, else 503 with a one-line
// reason. It takes no credentials and checks no Host, and says nothing
// else (no counts, no connection details), so a load balancer or an
// orchestrator can probe it.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", s.static)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s.url("/queues"), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /queues", s.queuesPage)
	mux.HandleFunc("GET /queues/{name}", s.queuePage)
	mux.HandleFunc("GET /queues/{name}/history.svg", s.historySVG)
	mux.HandleFunc("GET /deadletters", s.deadLettersPage)
	mux.HandleFunc("GET /deadletters/{id}", s.deadLetterPage)
	mux.HandleFunc("POST /deadletters/{action}", s.actionPage)
	mux.HandleFunc("GET /api/queues", s.apiQueues)
	mux.HandleFunc("GET /api/queues/{name}", s.apiQueue)
	mux.HandleFunc("GET /api/deadletters", s.apiDeadLetters)
	mux.HandleFunc("GET /api/deadletters/{id}", s.apiDeadLetter)
	mux.HandleFunc("POST /api/deadletters/{action}", s.apiAction)
	mux.HandleFunc("GET /fleet", s.fleetPage)
	mux.HandleFunc("GET /api/fleet", s.apiFleet)
	mux.HandleFunc("POST /queues/{name}/{action}", s.pausePage)
	mux.HandleFunc("POST /api/queues/{name}/{action}", s.apiPause)
	mux.HandleFunc("GET /queues/{name}/messages", s.messagesPage)
	mux.HandleFunc("GET /queues/{name}/messages/{id}", s.messagePage)
	mux.HandleFunc("GET /queues/{name}/messages/{id}/body", s.messageBody)
	mux.HandleFunc("POST /queues/{name}/messages/cancel", s.cancelPage)
	mux.HandleFunc("GET /api/queues/{name}/messages", s.apiMessages)
	mux.HandleFunc("GET /api/queues/{name}/messages/{id}", s.apiMessage)
	mux.HandleFunc("POST /api/queues/{name}/messages/cancel", s.apiCancel)
	mux.HandleFunc("GET /deadletters/{id}/body", s.deadLetterBody)
	mux.HandleFunc("GET /groups", s.groupsPage)
	mux.HandleFunc("GET /api/groups", s.apiGroups)
	mux.HandleFunc("POST /groups/retire", s.retirePage)
	mux.HandleFunc("POST /api/groups/retire", s.apiRetire)
	guarded := s.guard(mux)
	health := http.HandlerFunc(s.healthz)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == s.cfg.Prefix+"/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			health.ServeHTTP(w, r)
			return
		}
		if s.cfg.Prefix == "" {
			guarded.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == s.cfg.Prefix {
			http.Redirect(w, r, s.url("/queues"), http.StatusSeeOther)
			return
		}
		http.StripPrefix(s.cfg.Prefix, guarded).ServeHTTP(w, r)
	})
}

// healthz answers the console's own health (see Handler).
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	ctx, cancel := context.WithTimeout(r.Context(), pingTimeout)
	defer cancel()
	var err error
	if p, ok := s.cfg.Source.(pinger); ok {
		err = p.Ping(ctx)
	} else {
		_, err = s.listQueues(ctx)
	}
	if err != nil {
		s.cfg.Logger.Warn("console: health check failed", "err", err)
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "unavailable: the console cannot reach its database")
		return
	}
	fmt.Fprintln(w, "ok")
}

// ---------------------------------------------------------------- views

// queueView is one queue as the pages and the API show it.
type queueView struct {
	Name         string `json:"name"`
	Topic        string `json:"topic,omitempty"`
	Group        string `json:"group,omitempty"`
	Ready        int64  `json:"ready"`
	Delayed      int64  `json:"delayed"`
	InFlight     int64  `json:"in_flight"`
	DeadLettered int64  `json:"dead_lettered"`
	// ReadyMore, DelayedMore and InFlightMore are true when that count
	// stopped at inspect.QueueCountCap (the list of queues).
	ReadyMore    bool `json:"ready_more,omitempty"`
	DelayedMore  bool `json:"delayed_more,omitempty"`
	InFlightMore bool `json:"in_flight_more,omitempty"`
	// DeadMore is true when DeadLettered stopped at inspect.DeadCountCap.
	DeadMore        bool    `json:"dead_lettered_more,omitempty"`
	DeadLetterQueue string  `json:"dead_letter_queue,omitempty"`
	OldestReadySecs float64 `json:"oldest_ready_seconds"`
	// DrainedPerMinute is the mean drain rate over the window; -1 until
	// two samples were taken.
	DrainedPerMinute float64 `json:"drained_per_minute"`
	Missing          bool    `json:"missing,omitempty"`
	// Paused is true when the queue is paused fleet-wide; PausedBy says
	// who or why.
	Paused   bool   `json:"paused"`
	PausedBy string `json:"paused_by,omitempty"`
}

// OldestReady is the age shown in the tables.
func (q queueView) OldestReady() string {
	if q.Ready == 0 {
		return "–"
	}
	return age(time.Duration(q.OldestReadySecs * float64(time.Second)))
}

// Rate is the drain rate shown in the tables.
func (q queueView) Rate() string {
	if q.DrainedPerMinute < 0 {
		return "–"
	}
	return chart.FormatValue(math.Round(q.DrainedPerMinute*10)/10) + "/min"
}

// age is a short duration: 42s, 17m, 5h 3m, 3d 4h.
func age(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// upToCounter is implemented by sources that can stop counting a state's
// rows at a cap (*inspect.SQL): the list of queues counts at most
// inspect.QueueCountCap rows per queue and state, so its cost does not
// grow with the backlogs. The sampler counts exactly (the history and the
// drain rate need it); a queue's own page does too.
type upToCounter interface {
	QueuesUpTo(ctx context.Context, max int64) ([]inspect.QueueStats, error)
}

// listQueues returns every queue's counts for a page or the API.
func (s *Server) listQueues(ctx context.Context) ([]inspect.QueueStats, error) {
	if c, ok := s.cfg.Source.(upToCounter); ok {
		return c.QueuesUpTo(ctx, inspect.QueueCountCap)
	}
	return s.cfg.Source.Queues(ctx)
}

func (s *Server) queueViews(ctx context.Context) ([]queueView, error) {
	qs, err := s.listQueues(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]queueView, len(qs))
	for i, q := range qs {
		out[i] = s.viewOf(q)
	}
	return out, nil
}

func (s *Server) viewOf(q inspect.QueueStats) queueView {
	return queueView{
		Name: q.Queue, Topic: q.Topic, Group: q.Group,
		Ready: q.Ready, Delayed: q.Delayed, InFlight: q.InFlight,
		ReadyMore: q.ReadyMore, DelayedMore: q.DelayedMore, InFlightMore: q.InFlightMore,
		DeadLettered: q.DeadLettered, DeadMore: q.DeadLetteredMore,
		DeadLetterQueue: q.DeadLetterQueue, OldestReadySecs: q.OldestReady.Seconds(),
		DrainedPerMinute: s.history.rate(q.Queue), Missing: q.Missing,
		Paused: q.Paused, PausedBy: q.PausedBy,
	}
}

// oneQueue is a Source that counts one queue without counting the others
// (inspect.SQL).
type oneQueue interface {
	Queue(ctx context.Context, name string) (inspect.QueueStats, error)
}

func (s *Server) findQueue(ctx context.Context, name string) (queueView, error) {
	if err := checkName("queue", name); err != nil {
		return queueView{}, err
	}
	if one, ok := s.cfg.Source.(oneQueue); ok {
		q, err := one.Queue(ctx, name)
		if err != nil {
			return queueView{}, err
		}
		return s.viewOf(q), nil
	}
	qs, err := s.queueViews(ctx)
	if err != nil {
		return queueView{}, err
	}
	for _, q := range qs {
		if q.Name == name || (q.Topic == name && q.Group == "") {
			return q, nil
		}
	}
	return queueView{}, fmt.Errorf("%w: %q is not a queue here", transport.ErrQueueNotFound, name)
}

// sortQueues sorts by key (name, ready, delayed, in_flight, dead,
// oldest), descending with desc; an unknown key is a bad request.
func sortQueues(qs []queueView, key string, desc bool) error {
	by := map[string]func(q queueView) float64{
		"ready": func(q queueView) float64 { return float64(q.Ready) }, "delayed": func(q queueView) float64 { return float64(q.Delayed) },
		"in_flight": func(q queueView) float64 { return float64(q.InFlight) }, "dead": func(q queueView) float64 { return float64(q.DeadLettered) },
		"oldest": func(q queueView) float64 { return q.OldestReadySecs }, "rate": func(q queueView) float64 { return q.DrainedPerMinute },
	}
	cmp := func(a, b queueView) int { return strings.Compare(a.Name, b.Name) }
	if f, ok := by[key]; ok {
		cmp = func(a, b queueView) int {
			if c := compare(f(a), f(b)); c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		}
	} else if key != "" && key != "name" {
		return badInput("sort=%q: want name, ready, delayed, in_flight, dead, oldest or rate", key)
	}
	slices.SortStableFunc(qs, func(a, b queueView) int {
		if desc {
			return cmp(b, a)
		}
		return cmp(a, b)
	})
	return nil
}

func compare(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func filterQueues(qs []queueView, sub string) []queueView {
	sub = strings.ToLower(strings.TrimSpace(sub))
	if sub == "" {
		return qs
	}
	return slices.DeleteFunc(qs, func(q queueView) bool {
		return !strings.Contains(strings.ToLower(q.Name+" "+q.Topic), sub)
	})
}

// deadView is one dead letter as the pages and the API show it.
type deadView struct {
	ID       string            `json:"id"`
	Queue    string            `json:"queue"`
	Topic    string            `json:"topic,omitempty"`
	Group    string            `json:"group,omitempty"`
	UUID     string            `json:"uuid"`
	Attempts int               `json:"attempts"`
	Reason   string            `json:"reason"`
	FailedAt time.Time         `json:"failed_at"`
	Size     int               `json:"size"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// AttemptErrors are the nacked attempts before the last (from
	// Metadata's transport.MetadataAttemptErrors), in the detail.
	AttemptErrors []attemptView `json:"attempt_errors,omitempty"`
	// Body is the payload as text (when it is UTF-8) or hex, at most
	// PreviewLimit bytes of it; BodyEncoding says which.
	Body         string `json:"body,omitempty"`
	BodyEncoding string `json:"body_encoding,omitempty"`
	Truncated    bool   `json:"truncated,omitempty"`
}

// Ago is the time since it failed.
func (d deadView) Ago() string { return age(time.Since(d.FailedAt)) }

// Short is the reason on one line, at most 120 characters.
func (d deadView) Short() string {
	r := []rune(strings.Join(strings.Fields(d.Reason), " "))
	if len(r) > 120 {
		return string(r[:119]) + "…"
	}
	return string(r)
}

// MetaKeys are the metadata keys, sorted, without the attempt history
// when the detail lists it.
func (d deadView) MetaKeys() []string {
	keys := make([]string, 0, len(d.Metadata))
	for k := range d.Metadata {
		if k != transport.MetadataAttemptErrors || len(d.AttemptErrors) == 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// wbr returns name, escaped, with a line-break opportunity (<wbr>) after
// each '_', '.', '-' and ':', so that a long queue or listener name wraps
// between its words in a narrow column rather than inside one.
func wbr(name string) template.HTML {
	var b strings.Builder
	for _, r := range name {
		b.WriteString(template.HTMLEscapeString(string(r)))
		switch r {
		case '_', '.', '-', ':':
			b.WriteString("<wbr>")
		}
	}
	return template.HTML(b.String()) // every part escaped above
}

// attemptView is one nacked attempt of a message.
type attemptView struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Reason  string    `json:"reason,omitempty"`
}

// attemptsOf returns the nacked attempts md's
// transport.MetadataAttemptErrors holds, oldest first.
func attemptsOf(md map[string]string) []attemptView {
	es := transport.AttemptErrors(md)
	if len(es) == 0 {
		return nil
	}
	vs := make([]attemptView, len(es))
	for i, e := range es {
		vs[i] = attemptView{Attempt: e.Attempt, At: e.At, Reason: e.Reason}
	}
	return vs
}

func toView(d inspect.DeadLetter) deadView {
	return deadView{ID: d.ID, Queue: d.Queue, UUID: d.UUID, Attempts: d.Attempts, Reason: d.Reason, FailedAt: d.FailedAt.UTC(), Size: len(d.Payload)}
}

// preview renders body as view ("text", "json", "hex"; "" picks JSON
// when it parses, else text when it is UTF-8, else hex), capped at limit
// bytes.
func preview(body []byte, view string, limit int) (out, used string, truncated bool) {
	if len(body) > limit {
		body, truncated = body[:limit], true
	}
	if view == "" {
		switch {
		case !truncated && json.Valid(body) && len(bytes.TrimSpace(body)) > 0:
			view = "json"
		case printable(body):
			view = "text"
		default:
			view = "hex"
		}
	}
	switch view {
	case "json":
		var b bytes.Buffer
		if json.Indent(&b, body, "", "  ") == nil {
			return b.String(), "json", truncated
		}
		if utf8.Valid(body) {
			return string(body), "text", truncated
		}
		return hex.Dump(body), "hex", truncated
	case "text":
		if utf8.Valid(body) {
			return string(body), "text", truncated
		}
		return strings.ToValidUTF8(string(body), "\uFFFD"), "text", truncated
	default:
		return hex.Dump(body), "hex", truncated
	}
}

// printable reports whether body is UTF-8 text without control
// characters other than tab, newline and carriage return.
func printable(body []byte) bool {
	if !utf8.Valid(body) {
		return false
	}
	for _, r := range string(body) {
		if (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || r == 0x7f {
			return false
		}
	}
	return true
}

func (s *Server) getDead(ctx context.Context, id string) (inspect.DeadLetter, error) {
	if _, err := parseIDs([]string{id}); err != nil {
		return inspect.DeadLetter{}, err
	}
	p, err := s.cfg.Source.DeadLetterPage(ctx, inspect.Filter{IDs: []string{id}}, "", 1)
	if err != nil {
		return inspect.DeadLetter{}, err
	}
	if len(p.DeadLetters) == 0 {
		return inspect.DeadLetter{}, fmt.Errorf("%w: no dead letter with id %q (replayed or deleted?)", errNotFound, id)
	}
	return p.DeadLetters[0], nil
}

var errNotFound = errors.New("not found")

// status is the HTTP status of an error: 400 for bad input, 404 for an
// unknown queue, dead letter or message, 403 for an action on a read-only
// console, 409 for a retire refused without force, 501 for browsing
// messages or listing groups where the transport cannot, 500 otherwise.
func status(err error) int {
	switch {
	case errors.Is(err, errBadInput), errors.Is(err, inspect.ErrBadCursor), errors.Is(err, inspect.ErrBadID), errors.Is(err, inspect.ErrBadMessageFilter), errors.Is(err, transport.ErrInvalidConfig):
		return http.StatusBadRequest
	case errors.Is(err, transport.ErrQueueNotFound), errors.Is(err, errNotFound), errors.Is(err, inspect.ErrMessageNotFound):
		return http.StatusNotFound
	case errors.Is(err, errReadOnly):
		return http.StatusForbidden
	case errors.Is(err, errRefused):
		return http.StatusConflict
	case errors.Is(err, errNoBrowse), errors.Is(err, errNoGroups):
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

var errReadOnly = errors.New("read-only console: actions are disabled")

// pinger is a Source that can tell whether its database answers
// (inspect.SQL).
type pinger interface {
	Ping(ctx context.Context) error
}

// pingTimeout bounds the ping that tells an unreachable database from
// another failure.
const pingTimeout = 2 * time.Second

// The bodies of 5xx answers: the detail (a driver's text, which can name
// hosts, ports, users and schemas) goes to the Logger only.
const (
	msgUnavailable = "cannot reach the database, so nothing can be said about what it holds; try again later (the console's log has the details)"
	msgInternal    = "the request failed (the console's log has the details)"
)

// classify returns the status and the one-line message of err. A failure
// that is not the request's fault is 503 when the Source's database does
// not answer a ping (an operator must never read "nothing there" when the
// truth is "cannot see"), else 500; both are logged and answered with a
// generic message.
func (s *Server) classify(r *http.Request, err error) (int, string) {
	code := status(err)
	if code != http.StatusInternalServerError {
		return code, strings.TrimPrefix(err.Error(), "bad request: ")
	}
	msg := msgInternal
	if p, ok := s.cfg.Source.(pinger); ok {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), pingTimeout)
		defer cancel()
		if p.Ping(ctx) != nil {
			code, msg = http.StatusServiceUnavailable, msgUnavailable
		}
	}
	s.cfg.Logger.Error("console: request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	return code, msg
}

// fail answers err as one line of text: "404 not found: …". A page (not
// /api/) gets it inside the layout, as an alert.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := s.classify(r, err)
	line := fmt.Sprintf("%d %s: %s", code, strings.ToLower(http.StatusText(code)), msg)
	if !strings.HasPrefix(r.URL.Path, "/api/") {
		if s.renderCode(w, code, "error", http.StatusText(code), "", map[string]any{"Code": code, "Line": line, "Unavailable": code == http.StatusServiceUnavailable}) == nil {
			return
		}
	}
	http.Error(w, line, code)
}

// ---------------------------------------------------------------- API

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (s *Server) apiQueues(w http.ResponseWriter, r *http.Request) {
	qs, err := s.queueViews(r.Context())
	if err == nil {
		qs = filterQueues(qs, r.URL.Query().Get("q"))
		err = sortQueues(qs, r.URL.Query().Get("sort"), r.URL.Query().Get("desc") != "")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": qs, "read_only": s.cfg.ReadOnly})
}

func (s *Server) apiQueue(w http.ResponseWriter, r *http.Request) {
	q, err := s.findQueue(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"queue": q, "history": s.history.get(q.Name)})
}

func (s *Server) pageOf(r *http.Request) (inspect.Filter, []deadView, string, error) {
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		return f, nil, "", err
	}
	limit := s.cfg.PageSize
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return f, nil, "", badInput("limit=%q is not 1 to 1000", v)
		}
		limit = n
	}
	p, err := s.cfg.Source.DeadLetterPage(r.Context(), f, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return f, nil, "", err
	}
	views := make([]deadView, len(p.DeadLetters))
	for i, d := range p.DeadLetters {
		views[i] = toView(d)
	}
	s.withTopics(r.Context(), views)
	return f, views, p.Next, nil
}

// withTopics sets each view's Topic and Group from the queues the sampler
// last saw or, before its first sample, from the Source (left empty when
// that fails: the queue's name is still shown).
func (s *Server) withTopics(ctx context.Context, vs []deadView) {
	tg := s.history.topics()
	if len(tg) == 0 {
		if qs, err := s.listQueues(ctx); err == nil {
			s.history.setTopics(qs)
			tg = s.history.topics()
		}
	}
	for i := range vs {
		if t, ok := tg[vs[i].Queue]; ok {
			vs[i].Topic, vs[i].Group = t.topic, t.group
		}
	}
}

func (s *Server) apiDeadLetters(w http.ResponseWriter, r *http.Request) {
	_, views, next, err := s.pageOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": views, "next": next})
}

func (s *Server) apiDeadLetter(w http.ResponseWriter, r *http.Request) {
	d, err := s.getDead(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := toView(d)
	v.Metadata, v.AttemptErrors = d.Metadata, attemptsOf(d.Metadata)
	vs := []deadView{v}
	s.withTopics(r.Context(), vs)
	v = vs[0]
	view := r.URL.Query().Get("view")
	if view != "" && view != "text" && view != "json" && view != "hex" {
		s.fail(w, r, badInput("view=%q: want text, json or hex", view))
		return
	}
	v.Body, v.BodyEncoding, v.Truncated = preview(d.Payload, view, s.cfg.PreviewLimit)
	writeJSON(w, http.StatusOK, v)
}

// actionRequest is the body of POST /api/deadletters/{replay,delete}.
type actionRequest struct {
	// IDs selects these dead letters...
	IDs []string `json:"ids"`
	// ...or All, every dead letter Filter selects.
	All    bool `json:"all"`
	Filter struct {
		Queue     string `json:"queue"`
		Reason    string `json:"reason"`
		Since     string `json:"since"`
		Until     string `json:"until"`
		OlderThan string `json:"older_than"`
		NewerThan string `json:"newer_than"`
	} `json:"filter"`
	// Delay delays replayed messages ("5m").
	Delay string `json:"delay"`
}

// actionResult reports an action: how many were asked for (ids; -1 for
// all matching) and how many this request moved or deleted. Fewer than
// requested means the others were already gone (replayed or deleted by
// someone else, or by an earlier try of the same request).
type actionResult struct {
	Action    string   `json:"action"`
	Requested int      `json:"requested"`
	Done      int      `json:"done"`
	IDs       []string `json:"ids"`
}

// act runs a replay or delete of the ids, or of all that f selects.
func (s *Server) act(ctx context.Context, action string, ids []string, all bool, f inspect.Filter, delay time.Duration) (actionResult, error) {
	if s.cfg.ReadOnly {
		return actionResult{}, errReadOnly
	}
	if action != "replay" && action != "delete" {
		return actionResult{}, fmt.Errorf("%w: no action %q (want replay or delete)", errNotFound, action)
	}
	ids, err := parseIDs(ids)
	if err != nil {
		return actionResult{}, err
	}
	res := actionResult{Action: action, Requested: len(ids), IDs: []string{}}
	switch {
	case all && len(ids) > 0:
		return res, badInput("give ids or all, not both")
	case all:
		res.Requested = -1
	case len(ids) == 0:
		return res, badInput("nothing selected: give ids, or all with a filter")
	default:
		f = inspect.Filter{IDs: ids}
	}
	if action == "delete" && delay > 0 {
		return res, badInput("delay applies to replay only")
	}
	var done []inspect.DeadLetter
	if action == "replay" {
		done, err = s.cfg.Source.ReplayDelayed(ctx, f, delay)
	} else {
		done, err = s.cfg.Source.Purge(ctx, f, false)
	}
	res.Done = len(done)
	for _, d := range done {
		res.IDs = append(res.IDs, d.ID)
	}
	return res, err
}

func (s *Server) apiAction(w http.ResponseWriter, r *http.Request) {
	var req actionRequest
	if err := decodeJSON(w, r, 1<<20, &req); err != nil {
		s.fail(w, r, badInput("body is not the JSON of an action: %v", err))
		return
	}
	q := url.Values{}
	q.Set("queue", req.Filter.Queue)
	q.Set("reason", req.Filter.Reason)
	q.Set("since", req.Filter.Since)
	q.Set("until", req.Filter.Until)
	q.Set("older_than", req.Filter.OlderThan)
	q.Set("newer_than", req.Filter.NewerThan)
	f, err := parseFilter(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	delay, err := parseDelay(req.Delay)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.act(r.Context(), r.PathValue("action"), req.IDs, req.All, f, delay)
	if err != nil {
		if res.Done > 0 {
			code, msg := s.classify(r, err)
			s.cfg.Logger.Error("console: action cut short", "action", res.Action, "done", res.Done, "err", err)
			writeJSON(w, code, map[string]any{"result": res, "error": msg})
			return
		}
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// ---------------------------------------------------------------- pages

// page is what every template gets.
type page struct {
	Title    string
	Nav      string
	Kind     string
	ReadOnly bool
	// Fleet is true when the source keeps the fleet tables: the pause and
	// resume actions exist.
	Fleet bool
	// FleetPage is true when the Fleet page exists: fleet tables or
	// health URLs.
	FleetPage bool
	// Groups is true when the source lists consumer groups: the Groups
	// page exists.
	Groups  bool
	Refresh int64 // milliseconds
	Data    any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, name, title, nav string, data any) {
	if err := s.renderCode(w, http.StatusOK, name, title, nav, data); err != nil {
		code, msg := s.classify(r, err)
		http.Error(w, fmt.Sprintf("%d %s: %s", code, strings.ToLower(http.StatusText(code)), msg), code)
	}
}

// renderCode writes the page name with status code, or nothing and an
// error when the template fails.
func (s *Server) renderCode(w http.ResponseWriter, code int, name, title, nav string, data any) error {
	var b bytes.Buffer
	p := page{Title: title, Nav: nav, Kind: s.cfg.Kind, ReadOnly: s.cfg.ReadOnly, Fleet: s.fleet() != nil, FleetPage: s.hasFleetPage(), Groups: s.groups() != nil, Refresh: s.cfg.Refresh.Milliseconds(), Data: data}
	if err := s.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		return fmt.Errorf("console: page %s: %w", name, err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = b.WriteTo(w)
	return nil
}

func (s *Server) parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"base":          func() string { return s.cfg.Prefix },
		"time":          func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"iso":           func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"wbr":           wbr,
		"sortLink":      func(cur sortState, key string) string { return s.url(sortLink("/queues", cur, key)) },
		"fleetSortLink": func(cur sortState, key string) string { return s.url(sortLink("/fleet", cur, key)) },
		"ariaSort": func(cur sortState, key string) string {
			if cur.Key != key {
				return "none"
			}
			if cur.Desc {
				return "descending"
			}
			return "ascending"
		},
	}
	names, err := fs.Glob(assets, "assets/templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimSuffix(n[strings.LastIndex(n, "/")+1:], ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", n, err)
		}
		out[base] = t
	}
	return out, nil
}

// sortLink is the link of a sortable column's header on page.
func sortLink(page string, cur sortState, key string) string {
	q := url.Values{}
	if cur.Q != "" {
		q.Set("q", cur.Q)
	}
	q.Set("sort", key)
	if cur.Key == key && !cur.Desc {
		q.Set("desc", "1")
	}
	return page + "?" + q.Encode()
}

type sortState struct {
	Q, Key string
	Desc   bool
}

func (s *Server) queuesPage(w http.ResponseWriter, r *http.Request) {
	qs, err := s.queueViews(r.Context())
	st := sortState{Q: r.URL.Query().Get("q"), Key: r.URL.Query().Get("sort"), Desc: r.URL.Query().Get("desc") != ""}
	if st.Key == "" {
		st.Key = "name"
	}
	if err == nil {
		qs = filterQueues(qs, st.Q)
		err = sortQueues(qs, st.Key, st.Desc)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "queues", "Queues", "queues", map[string]any{"Queues": qs, "Sort": st, "Flash": pauseFlash(r.URL.Query())})
}

func (s *Server) queuePage(w http.ResponseWriter, r *http.Request) {
	q, err := s.findQueue(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "queue", "Queue "+q.Name, "queues", map[string]any{"Q": q, "Samples": len(s.history.get(q.Name)), "Span": span(s.historySpan()), "Stored": s.store != nil, "Window": span(s.cfg.Window), "Flash": pauseFlash(r.URL.Query()), "Browse": s.messages() != nil})
}

// historySpan is how far back the history chart goes.
func (s *Server) historySpan() time.Duration {
	if s.store != nil {
		return max(s.cfg.Window, s.cfg.HistoryKeep)
	}
	return s.cfg.Window
}

// span writes d as "1h", "24h" or "30m0s".
func span(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}

func (s *Server) historySVG(w http.ResponseWriter, r *http.Request) {
	q, err := s.findQueue(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	hs := s.history.get(q.Name)
	now := s.cfg.Now()
	// Beyond two hours (the stored history), the x axis is in hours.
	unit, xlabel := 1.0, "minutes from now"
	if len(hs) > 0 && now.Sub(hs[0].At) > 2*time.Hour {
		unit, xlabel = 60, "hours from now"
	}
	lines := []chart.Line{{Name: "ready"}, {Name: "delayed"}, {Name: "in flight"}, {Name: "dead-lettered"}}
	for _, h := range hs {
		x := -now.Sub(h.At).Minutes() / unit
		for i, v := range []int64{h.Ready, h.Delayed, h.InFlight, h.DeadLettered} {
			lines[i].Points = append(lines[i].Points, chart.XY{X: x, Y: float64(v)})
		}
	}
	c := chart.Lines{Title: q.Name + " — last " + span(s.historySpan()), XLabel: xlabel, YLabel: "messages", Lines: lines}
	var b bytes.Buffer
	if len(hs) == 0 {
		c.Lines = []chart.Line{{Name: "no samples yet", Points: []chart.XY{{X: 0, Y: 0}}}}
	}
	if err := c.WriteSVG(&b); err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = b.WriteTo(w)
}

func (s *Server) deadLettersPage(w http.ResponseWriter, r *http.Request) {
	f, views, next, err := s.pageOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	fq := filterQuery(r.URL.Query())
	nextLink := ""
	if next != "" {
		q := filterQuery(r.URL.Query())
		q.Set("cursor", next)
		nextLink = s.url("/deadletters?" + q.Encode())
	}
	// The queue picker lists the queues the sampler last saw: counting
	// every queue again would cost the page more than its dead letters.
	names := s.history.names()
	if len(names) == 0 {
		qs, _ := s.listQueues(r.Context())
		for _, q := range qs {
			names = append(names, q.Queue)
		}
	}
	s.render(w, r, "deadletters", "Dead letters", "deadletters", map[string]any{
		"Dead": views, "Next": nextLink, "First": r.URL.Query().Get("cursor") != "",
		"Filter": f, "Form": fq, "FilterQuery": fq.Encode(), "Queues": names,
		"Flash": flash(r.URL.Query()),
	})
}

// flash is the message of a finished action, from the redirect's query.
func flash(q url.Values) string {
	action, done, req := q.Get("done"), q.Get("n"), q.Get("of")
	if action != "replayed" && action != "deleted" {
		return ""
	}
	n, err1 := strconv.Atoi(done)
	of, err2 := strconv.Atoi(req)
	if err1 != nil || err2 != nil {
		return ""
	}
	msg := fmt.Sprintf("%s %d dead letter(s).", strings.ToUpper(action[:1])+action[1:], n)
	if of >= 0 && n < of {
		msg += fmt.Sprintf(" %d of the %d selected were already gone (replayed or deleted by someone else).", of-n, of)
	}
	return msg
}

func (s *Server) deadLetterPage(w http.ResponseWriter, r *http.Request) {
	d, err := s.getDead(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	view := r.URL.Query().Get("view")
	if view != "" && view != "text" && view != "json" && view != "hex" {
		s.fail(w, r, badInput("view=%q: want text, json or hex", view))
		return
	}
	v := toView(d)
	v.Metadata, v.AttemptErrors = d.Metadata, attemptsOf(d.Metadata)
	vs := []deadView{v}
	s.withTopics(r.Context(), vs)
	v = vs[0]
	v.Body, v.BodyEncoding, v.Truncated = preview(d.Payload, view, s.cfg.PreviewLimit)
	s.render(w, r, "deadletter", "Dead letter "+d.ID, "deadletters", map[string]any{"D": v, "Limit": s.cfg.PreviewLimit})
}

// actionPage handles the forms: without confirm=yes it shows what would be
// done and asks; with it, it acts and redirects to the dead letters with
// the counts (so reloading the result does not act again).
func (s *Server) actionPage(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, badInput("form: %v", err))
		return
	}
	action := r.PathValue("action")
	if s.cfg.ReadOnly {
		s.fail(w, r, errReadOnly)
		return
	}
	if action != "replay" && action != "delete" {
		s.fail(w, r, fmt.Errorf("%w: no action %q", errNotFound, action))
		return
	}
	f, err := parseFilter(r.PostForm)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	delay, err := parseDelay(r.PostForm.Get("delay"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ids, err := parseIDs(r.PostForm["id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	all := r.PostForm.Get("all") == "1"
	if !all && len(ids) == 0 {
		s.fail(w, r, badInput("nothing selected: tick the dead letters to %s, or use “all matching”", action))
		return
	}
	if all {
		ids = nil
	}
	if r.PostForm.Get("confirm") != "yes" {
		data := map[string]any{
			"Action": action, "IDs": ids, "All": all, "Filter": f, "Form": filterQuery(r.PostForm), "Delay": r.PostForm.Get("delay"),
			"Back": s.url("/deadletters?" + filterQuery(r.PostForm).Encode()), "Detail": r.PostForm.Get("back") == "detail",
		}
		// "All matching" shows how many match now, where the source can
		// count them.
		if dc, ok := s.cfg.Source.(deadCounter); ok && all {
			n, err := dc.CountDead(r.Context(), f)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			data["Counted"], data["Count"] = true, n
		}
		s.render(w, r, "confirm", "Confirm "+action, "deadletters", data)
		return
	}
	res, err := s.act(r.Context(), action, ids, all, f, delay)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := filterQuery(r.PostForm)
	if r.PostForm.Get("back") == "detail" {
		q = url.Values{}
	}
	q.Set("done", map[string]string{"replay": "replayed", "delete": "deleted"}[action])
	q.Set("n", strconv.Itoa(res.Done))
	q.Set("of", strconv.Itoa(res.Requested))
	http.Redirect(w, r, s.url("/deadletters?"+q.Encode()), http.StatusSeeOther)
}
