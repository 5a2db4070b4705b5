package console

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-go/berth/internal/inspect"
)

// MessageSource is a Source that can browse a queue's messages and cancel
// pending or delayed ones (inspect.SQL). On a Source without it (SQS,
// which cannot read a message without receiving it) the message pages
// say so and the API answers 501.
type MessageSource interface {
	// MessagePage returns one keyset page of the messages f selects.
	MessagePage(ctx context.Context, f inspect.MessageFilter, cursor string, limit int) (inspect.MessagePage, error)
	// Message returns one message, with its metadata and payload.
	Message(ctx context.Context, queue, id string) (inspect.Message, error)
	// CancelMessages deletes the named messages that are still pending or
	// delayed and as seen.
	CancelMessages(ctx context.Context, queue string, refs []inspect.MessageRef) (inspect.CancelResult, error)
	// CountCancellable counts what CancelMatching would take.
	CountCancellable(ctx context.Context, f inspect.MessageFilter) (inspect.Cancellable, error)
	// CancelMatching deletes the pending or delayed messages f selects up
	// to an id, fenced as CancelMessages.
	CancelMatching(ctx context.Context, f inspect.MessageFilter, upTo int64) (inspect.CancelResult, error)
}

// deadCounter is a Source that counts dead letters (inspect.SQL), so that
// an action on all matching shows how many first.
type deadCounter interface {
	CountDead(ctx context.Context, f inspect.Filter) (int64, error)
}

// noBrowse is what the message pages say on a Source without MessageSource.
const noBrowse = "not available: SQS cannot browse without receiving (a receive hides the message from consumers and counts as a delivery attempt)"

var errNoBrowse = errors.New(noBrowse)

func (s *Server) messages() MessageSource {
	m, _ := s.cfg.Source.(MessageSource)
	return m
}

// messageView is one message as the pages and the API show it.
type messageView struct {
	ID          string            `json:"id"`
	Queue       string            `json:"queue"`
	UUID        string            `json:"uuid"`
	State       string            `json:"state"`
	Attempts    int               `json:"attempts"`
	Size        int               `json:"size"`
	CreatedAt   time.Time         `json:"created_at"`
	DueAt       time.Time         `json:"due_at"`
	LeaseUntil  *time.Time        `json:"lease_until,omitempty"`
	OrderingKey string            `json:"ordering_key,omitempty"`
	Version     string            `json:"version"`
	Cancellable bool              `json:"cancellable"`
	Preview     string            `json:"preview,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	// AttemptErrors are its nacked attempts (see deadView), in the detail.
	AttemptErrors []attemptView `json:"attempt_errors,omitempty"`
	// Body is the payload as text or hex, at most PreviewLimit bytes;
	// BodyEncoding says which.
	Body         string `json:"body,omitempty"`
	BodyEncoding string `json:"body_encoding,omitempty"`
	Truncated    bool   `json:"truncated,omitempty"`
}

// Ref is the id and version a cancel form sends.
func (m messageView) Ref() string { return m.ID + ":" + m.Version }

// Due is when it is (or was) due, relative to now.
func (m messageView) Due() string {
	d := time.Until(m.DueAt)
	if d > 0 {
		return "in " + age(d)
	}
	return age(-d) + " ago"
}

// MetaKeys are the metadata keys, sorted.
func (m messageView) MetaKeys() []string {
	return deadView{Metadata: m.Metadata, AttemptErrors: m.AttemptErrors}.MetaKeys()
}

// StateName is the state as the tables say it.
func (m messageView) StateName() string { return strings.ReplaceAll(m.State, "_", " ") }

func toMessageView(m inspect.Message) messageView {
	v := messageView{
		ID: m.ID, Queue: m.Queue, UUID: m.UUID, State: string(m.State), Attempts: m.Attempts, Size: m.Size,
		CreatedAt: m.CreatedAt, DueAt: m.DueAt, OrderingKey: m.OrderingKey, Version: m.Version, Cancellable: m.Cancellable(),
	}
	if !m.LeaseUntil.IsZero() {
		t := m.LeaseUntil
		v.LeaseUntil = &t
	}
	if m.Preview != nil {
		v.Preview = shortPreview(m.Preview, m.Size)
	}
	return v
}

// shortPreview is the start of a body on one line: text when printable,
// else the first bytes in hex.
func shortPreview(b []byte, size int) string {
	more := ""
	if size > len(b) {
		more = "…"
	}
	if printable(b) {
		return strings.Join(strings.Fields(string(b)), " ") + more
	}
	if len(b) > 24 {
		b, more = b[:24], "…"
	}
	return "hex " + hex.EncodeToString(b) + more
}

// msgFilterKeys are the query parameters parseMessageFilter reads.
var msgFilterKeys = []string{"state", "uuid", "key", "value"}

// parseMessageFilter reads a message filter of queue from q: state, uuid,
// key and value.
func parseMessageFilter(queue string, q url.Values) (inspect.MessageFilter, error) {
	f := inspect.MessageFilter{Queue: queue, UUID: strings.TrimSpace(q.Get("uuid")), Key: q.Get("key"), Value: q.Get("value")}
	var errs []error
	if err := checkName("queue", queue); err != nil {
		errs = append(errs, err)
	}
	st, err := inspect.ParseMessageState(strings.TrimSpace(q.Get("state")))
	if err != nil {
		errs = append(errs, badInput("state=%.20q: want pending, delayed, in_flight or all", q.Get("state")))
	}
	f.State = st
	for _, kv := range []struct{ name, v string }{{"uuid", f.UUID}, {"key", f.Key}, {"value", f.Value}} {
		if err := checkText(kv.name, kv.v); err != nil {
			errs = append(errs, err)
		}
		if len(kv.v) > 1000 {
			errs = append(errs, badInput("%s is longer than 1000 bytes", kv.name))
		}
	}
	if f.Value != "" && f.Key == "" {
		errs = append(errs, badInput("a metadata value needs its key"))
	}
	return f, errors.Join(errs...)
}

// messageQuery is f's query parameters as parseMessageFilter reads them.
func messageQuery(q url.Values) url.Values {
	out := url.Values{}
	for _, k := range msgFilterKeys {
		if v := q.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	return out
}

// messagesOf reads the page of queue that the request's query selects.
func (s *Server) messagesOf(r *http.Request, queue string) (inspect.MessageFilter, []messageView, inspect.MessagePage, error) {
	ms := s.messages()
	if ms == nil {
		return inspect.MessageFilter{}, nil, inspect.MessagePage{}, errNoBrowse
	}
	f, err := parseMessageFilter(queue, r.URL.Query())
	if err != nil {
		return f, nil, inspect.MessagePage{}, err
	}
	limit := s.cfg.PageSize
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return f, nil, inspect.MessagePage{}, badInput("limit=%q is not 1 to 1000", v)
		}
		limit = n
	}
	p, err := ms.MessagePage(r.Context(), f, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return f, nil, p, err
	}
	views := make([]messageView, len(p.Messages))
	for i, m := range p.Messages {
		views[i] = toMessageView(m)
	}
	return f, views, p, nil
}

func (s *Server) apiMessages(w http.ResponseWriter, r *http.Request) {
	_, views, p, err := s.messagesOf(r, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": views, "next": p.Next, "searched": p.Searched, "partial": p.Partial})
}

// getMessage reads one message with its body previewed as the request's
// view asks.
func (s *Server) getMessage(r *http.Request) (messageView, []byte, error) {
	ms := s.messages()
	if ms == nil {
		return messageView{}, nil, errNoBrowse
	}
	queue, id := r.PathValue("name"), r.PathValue("id")
	if err := checkName("queue", queue); err != nil {
		return messageView{}, nil, err
	}
	if _, err := parseIDs([]string{id}); err != nil {
		return messageView{}, nil, err
	}
	view := r.URL.Query().Get("view")
	if view != "" && view != "text" && view != "json" && view != "hex" {
		return messageView{}, nil, badInput("view=%q: want text, json or hex", view)
	}
	m, err := ms.Message(r.Context(), queue, id)
	if err != nil {
		return messageView{}, nil, err
	}
	v := toMessageView(m)
	v.Metadata, v.AttemptErrors = m.Metadata, attemptsOf(m.Metadata)
	v.Body, v.BodyEncoding, v.Truncated = preview(m.Payload, view, s.cfg.PreviewLimit)
	return v, m.Payload, nil
}

func (s *Server) apiMessage(w http.ResponseWriter, r *http.Request) {
	v, _, err := s.getMessage(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// downloadBody sends a body as an attachment, as bytes: never rendered.
func downloadBody(w http.ResponseWriter, name string, body []byte) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}

func (s *Server) messageBody(w http.ResponseWriter, r *http.Request) {
	v, body, err := s.getMessage(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	downloadBody(w, "message-"+v.ID+".bin", body)
}

func (s *Server) deadLetterBody(w http.ResponseWriter, r *http.Request) {
	d, err := s.getDead(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	downloadBody(w, "dead-letter-"+d.ID+".bin", d.Payload)
}

func (s *Server) messagesPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	q, err := s.findQueue(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	data := map[string]any{"Q": q, "Flash": cancelFlash(r.URL.Query())}
	if s.messages() == nil {
		data["NoBrowse"] = noBrowse
		s.render(w, r, "messages", "Messages of "+q.Name, "queues", data)
		return
	}
	f, views, p, err := s.messagesOf(r, q.Name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	fq := messageQuery(r.URL.Query())
	base := s.url("/queues/" + url.PathEscape(q.Name) + "/messages?")
	next := ""
	if p.Next != "" {
		nq := messageQuery(r.URL.Query())
		nq.Set("cursor", p.Next)
		next = base + nq.Encode()
	}
	tabs := []map[string]any{}
	for _, st := range []inspect.MessageState{inspect.StatePending, inspect.StateDelayed, inspect.StateInFlight, inspect.StateAll} {
		tq := messageQuery(r.URL.Query())
		tq.Set("state", string(st))
		tabs = append(tabs, map[string]any{"Name": strings.ReplaceAll(string(st), "_", " "), "Link": base + tq.Encode(), "Current": st == f.State})
	}
	data["Messages"] = views
	data["Filter"] = f
	data["State"] = string(f.State)
	data["Form"] = fq
	data["First"] = r.URL.Query().Get("cursor") != ""
	data["FirstLink"] = base + fq.Encode()
	data["Next"] = next
	data["Partial"] = p.Partial
	data["Searched"] = p.Searched
	data["Searching"] = f.UUID != "" || f.Key != ""
	data["Tabs"] = tabs
	data["CanCancel"] = f.State != inspect.StateInFlight
	s.render(w, r, "messages", "Messages of "+q.Name, "queues", data)
}

func (s *Server) messagePage(w http.ResponseWriter, r *http.Request) {
	v, _, err := s.getMessage(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "message", "Message "+v.ID+" of "+v.Queue, "queues", map[string]any{"M": v, "Limit": s.cfg.PreviewLimit})
}

// parseRefs reads "id:version" values of a cancel form.
func parseRefs(vals []string) ([]inspect.MessageRef, error) {
	var out []inspect.MessageRef
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		id, ver, ok := strings.Cut(v, ":")
		if !ok || len(v) > 100 || checkName("message", v) != nil {
			return nil, badInput("%.40q is not a message as a page showed it (id:version)", v)
		}
		out = append(out, inspect.MessageRef{ID: id, Version: ver})
	}
	if len(out) > 1000 {
		return nil, badInput("at most 1000 messages at once, got %d", len(out))
	}
	return out, nil
}

// cancelResult reports a cancel: how many were asked for (named, or
// matched when the cancel ran), and what became of each.
type cancelResult struct {
	Action    string   `json:"action"`
	Queue     string   `json:"queue"`
	Requested int      `json:"requested"`
	Cancelled []string `json:"cancelled"`
	// Changed were claimed by a consumer or rescheduled since they were
	// seen, and left alone.
	Changed []string `json:"changed"`
	// Gone were delivered, cancelled or dead-lettered meanwhile.
	Gone []string `json:"gone"`
}

func toCancelResult(queue string, r inspect.CancelResult) cancelResult {
	nz := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	return cancelResult{Action: "cancel", Queue: queue, Requested: r.Requested, Cancelled: nz(r.Cancelled), Changed: nz(r.Changed), Gone: nz(r.Gone)}
}

// cancelRequest is the body of POST /api/queues/{name}/messages/cancel.
type cancelRequest struct {
	// Messages names messages as a page showed them...
	Messages []struct {
		ID      string `json:"id"`
		Version string `json:"version"`
	} `json:"messages"`
	// ...or All, every pending or delayed message Filter selects: first
	// with DryRun, which answers the count and up_to, then with UpTo, so
	// that the count comes before the action and later messages stay.
	All    bool `json:"all"`
	Filter struct {
		State string `json:"state"`
		UUID  string `json:"uuid"`
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"filter"`
	DryRun bool  `json:"dry_run"`
	UpTo   int64 `json:"up_to"`
}

func (s *Server) apiCancel(w http.ResponseWriter, r *http.Request) {
	if s.cfg.ReadOnly {
		s.fail(w, r, errReadOnly)
		return
	}
	ms := s.messages()
	if ms == nil {
		s.fail(w, r, errNoBrowse)
		return
	}
	var req cancelRequest
	if err := decodeJSON(w, r, 1<<20, &req); err != nil {
		s.fail(w, r, badInput("body is not the JSON of a cancel: %v", err))
		return
	}
	queue := r.PathValue("name")
	fq := url.Values{"state": {req.Filter.State}, "uuid": {req.Filter.UUID}, "key": {req.Filter.Key}, "value": {req.Filter.Value}}
	f, err := parseMessageFilter(queue, fq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !req.All {
		var vals []string
		for _, m := range req.Messages {
			vals = append(vals, m.ID+":"+m.Version)
		}
		refs, err := parseRefs(vals)
		switch {
		case err != nil:
		case len(refs) == 0:
			err = badInput("nothing selected: give messages, or all with a filter")
		case req.DryRun || req.UpTo != 0:
			err = badInput("dry_run and up_to go with all")
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		res, err := ms.CancelMessages(r.Context(), queue, refs)
		s.answerCancel(w, r, queue, res, err)
		return
	}
	if len(req.Messages) > 0 {
		s.fail(w, r, badInput("give messages or all, not both"))
		return
	}
	if req.DryRun {
		c, err := ms.CountCancellable(r.Context(), f)
		if err != nil {
			s.fail(w, r, notCancellable(err))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"queue": c.Queue, "matching": c.N, "up_to": c.UpTo})
		return
	}
	if req.UpTo < 1 {
		s.fail(w, r, badInput("all needs up_to, from a dry_run of the same filter: the count comes first"))
		return
	}
	res, err := ms.CancelMatching(r.Context(), f, req.UpTo)
	s.answerCancel(w, r, queue, res, notCancellable(err))
}

// notCancellable makes ErrNotCancellable a bad request.
func notCancellable(err error) error {
	if errors.Is(err, inspect.ErrNotCancellable) {
		return badInput("in-flight messages cannot be cancelled: a consumer holds them")
	}
	return err
}

func (s *Server) answerCancel(w http.ResponseWriter, r *http.Request, queue string, res inspect.CancelResult, err error) {
	if err != nil {
		if len(res.Cancelled) > 0 {
			code, msg := s.classify(r, err)
			s.cfg.Logger.Error("console: cancel cut short", "queue", queue, "cancelled", len(res.Cancelled), "err", err)
			writeJSON(w, code, map[string]any{"result": toCancelResult(queue, res), "error": msg})
			return
		}
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toCancelResult(queue, res))
}

// cancelPage handles the cancel and purge forms: without confirm=yes it
// shows what would be cancelled — the selected ids, or how many messages
// match right now — and asks; with it, it cancels and redirects to the
// messages with the outcome.
func (s *Server) cancelPage(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, badInput("form: %v", err))
		return
	}
	if s.cfg.ReadOnly {
		s.fail(w, r, errReadOnly)
		return
	}
	ms := s.messages()
	if ms == nil {
		s.fail(w, r, errNoBrowse)
		return
	}
	queue := r.PathValue("name")
	f, err := parseMessageFilter(queue, r.PostForm)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	refs, err := parseRefs(r.PostForm["m"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	all := r.PostForm.Get("all") == "1"
	if !all && len(refs) == 0 {
		s.fail(w, r, badInput("nothing selected: tick the messages to cancel, or use “all matching”"))
		return
	}
	if all {
		refs = nil
	}
	fq := messageQuery(r.PostForm)
	back := s.url("/queues/" + url.PathEscape(queue) + "/messages?" + fq.Encode())
	if r.PostForm.Get("confirm") != "yes" {
		data := map[string]any{"Queue": queue, "Refs": refs, "All": all, "Form": fq, "Back": back,
			"Purge": r.PostForm.Get("purge") == "1", "Filter": f}
		if all {
			c, err := ms.CountCancellable(r.Context(), f)
			if err != nil {
				s.fail(w, r, notCancellable(err))
				return
			}
			data["Count"], data["UpTo"] = c.N, c.UpTo
		}
		s.render(w, r, "cancelconfirm", "Confirm cancel", "queues", data)
		return
	}
	var res inspect.CancelResult
	if all {
		upTo, err := strconv.ParseInt(r.PostForm.Get("up_to"), 10, 64)
		if err != nil || upTo < 1 {
			s.fail(w, r, badInput("up_to=%.20q: confirm from the page that showed the count", r.PostForm.Get("up_to")))
			return
		}
		res, err = ms.CancelMatching(r.Context(), f, upTo)
		if err != nil {
			s.fail(w, r, notCancellable(err))
			return
		}
		if counted, err := strconv.Atoi(r.PostForm.Get("counted")); err == nil {
			res.Requested = counted
		}
	} else {
		res, err = ms.CancelMessages(r.Context(), queue, refs)
		if err != nil {
			s.fail(w, r, err)
			return
		}
	}
	q := messageQuery(r.PostForm)
	q.Set("done", "cancelled")
	q.Set("n", strconv.Itoa(len(res.Cancelled)))
	q.Set("of", strconv.Itoa(res.Requested))
	q.Set("changed", strconv.Itoa(len(res.Changed)))
	q.Set("gone", strconv.Itoa(len(res.Gone)))
	http.Redirect(w, r, s.url("/queues/"+url.PathEscape(queue)+"/messages?"+q.Encode()), http.StatusSeeOther)
}

// cancelFlash is the message of a finished cancel, from the redirect's
// query: how many were cancelled, and why the others were not.
func cancelFlash(q url.Values) string {
	if q.Get("done") != "cancelled" {
		return ""
	}
	var n [4]int
	for i, k := range []string{"n", "of", "changed", "gone"} {
		v, err := strconv.Atoi(q.Get(k))
		if err != nil || v < 0 {
			return ""
		}
		n[i] = v
	}
	done, of, changed, gone := n[0], n[1], n[2], n[3]
	msg := fmt.Sprintf("Cancelled %d of %d message(s).", done, of)
	if changed > 0 {
		msg += fmt.Sprintf(" %d skipped: claimed by a consumer or rescheduled since they were seen, and left alone.", changed)
	}
	if gone > 0 {
		msg += fmt.Sprintf(" %d skipped: already gone (delivered, cancelled or dead-lettered).", gone)
	}
	if rest := of - done - changed - gone; rest > 0 {
		msg += fmt.Sprintf(" %d of those counted no longer matched (claimed, delivered or cancelled by someone else before the cancel read them).", rest)
	}
	return msg
}
