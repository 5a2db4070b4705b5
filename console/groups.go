package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/berth-go/berth/internal/inspect"
)

// GroupSource is a Source that lists and retires the consumer groups of
// its topics (inspect.SQL). On a Source without it (SQS, where a consumer
// group is a queue subscribed to the topic) the Groups page says so and
// the API answers 501.
type GroupSource interface {
	// Groups lists the groups of topic ("" for every topic) with their
	// counts and last reader.
	Groups(ctx context.Context, topic string) (inspect.GroupList, error)
	// RetireGroup unregisters a group and drops its queue; without Force
	// it refuses, changing nothing, while the queue holds messages or a
	// live listener reads it.
	RetireGroup(ctx context.Context, topic, group string, o inspect.RetireOptions) (inspect.Retired, error)
}

var _ GroupSource = (*inspect.SQL)(nil)

var errNoGroups = errors.New("not available: this transport keeps no consumer-group registry (SQS: a consumer group is a queue subscribed to the topic; list and delete it with the AWS tools)")

// errRefused is a retire that was refused without force: 409.
var errRefused = errors.New("refused")

func (s *Server) groups() GroupSource {
	g, _ := s.cfg.Source.(GroupSource)
	return g
}

// readerView is a group's last reader as the pages and the API show it.
type readerView struct {
	Basis    string    `json:"basis"`
	At       time.Time `json:"at,omitzero"`
	Instance string    `json:"instance,omitempty"`
	Live     bool      `json:"live"`
	// Text is the reader as `berth groups` prints it: "live, 2s ago
	// (fleet host/1/ab)", "3h ago (lease)", "never", "unknown".
	Text string `json:"text"`
}

// groupView is one consumer group as the pages and the API show it.
type groupView struct {
	Topic      string    `json:"topic"`
	Group      string    `json:"group"` // "" for the topic's default reader
	Queue      string    `json:"queue"`
	Registered time.Time `json:"registered,omitzero"`
	Ready      int64     `json:"ready"`
	Delayed    int64     `json:"delayed"`
	InFlight   int64     `json:"in_flight"`
	// ReadyMore, DelayedMore and InFlightMore are true when that count
	// stopped at inspect.QueueCountCap.
	ReadyMore    bool       `json:"ready_more,omitempty"`
	DelayedMore  bool       `json:"delayed_more,omitempty"`
	InFlightMore bool       `json:"in_flight_more,omitempty"`
	OldestSecs   float64    `json:"oldest_seconds"`
	Missing      bool       `json:"missing,omitempty"`
	Stray        bool       `json:"stray,omitempty"`
	LastReader   readerView `json:"last_reader"`
}

// Name is the group as the table shows it.
func (g groupView) Name() string {
	if g.Group == "" {
		return "(default reader)"
	}
	return g.Group
}

// Messages counts the group's messages, every state.
func (g groupView) Messages() int64 { return g.Ready + g.Delayed + g.InFlight }

// Oldest is the age of the group's oldest message, or "–".
func (g groupView) Oldest() string {
	if g.OldestSecs <= 0 {
		return "–"
	}
	return age(time.Duration(g.OldestSecs * float64(time.Second)))
}

func toGroupView(g inspect.Group, now time.Time) groupView {
	r := g.LastReader
	text := r.Basis
	switch r.Basis {
	case inspect.ReadNever, inspect.ReadUnknown:
	case "":
		text, r.Basis = inspect.ReadUnknown, inspect.ReadUnknown
	default:
		text = age(now.Sub(r.At)) + " ago (" + r.Basis
		if r.Instance != "" {
			text += " " + r.Instance
		}
		text += ")"
		if r.Live {
			text = "live, " + text
		}
	}
	var at time.Time
	if !r.At.IsZero() {
		at = r.At.UTC()
	}
	return groupView{
		Topic: g.Topic, Group: g.Group, Queue: g.Queue, Registered: g.Registered.UTC(),
		Ready: g.Ready, Delayed: g.Delayed, InFlight: g.InFlight, OldestSecs: g.OldestAge.Seconds(),
		ReadyMore: g.ReadyMore, DelayedMore: g.DelayedMore, InFlightMore: g.InFlightMore,
		Missing: g.Missing, Stray: g.Stray,
		LastReader: readerView{Basis: r.Basis, At: at, Instance: r.Instance, Live: r.Live, Text: text},
	}
}

// groupViews lists the groups of topic ("" for all) and how many
// listeners report to the fleet table.
// upToGrouper is implemented by group sources that can stop counting at a
// cap (*inspect.SQL): the list of every group counts at most
// inspect.QueueCountCap rows per group and state, as the list of queues
// does; a retire's confirmation counts its topic's groups exactly.
type upToGrouper interface {
	GroupsUpTo(ctx context.Context, topic string, max int64) (inspect.GroupList, error)
}

func (s *Server) groupViews(ctx context.Context, topic string, exact bool) ([]groupView, int, error) {
	gs := s.groups()
	if gs == nil {
		return nil, 0, errNoGroups
	}
	if err := checkName("topic", topic); err != nil {
		return nil, 0, err
	}
	var l inspect.GroupList
	var err error
	if c, ok := gs.(upToGrouper); ok && !exact {
		l, err = c.GroupsUpTo(ctx, topic, inspect.QueueCountCap)
	} else {
		l, err = gs.Groups(ctx, topic)
	}
	if err != nil {
		return nil, 0, err
	}
	now := s.cfg.Now()
	out := make([]groupView, len(l.Groups))
	for i, g := range l.Groups {
		out[i] = toGroupView(g, now)
	}
	return out, l.Reporting, nil
}

// findGroup returns group of topic, or false when it is not registered.
func (s *Server) findGroup(ctx context.Context, topic, group string) (groupView, bool, error) {
	gs, _, err := s.groupViews(ctx, topic, true)
	if err != nil {
		return groupView{}, false, err
	}
	for _, g := range gs {
		if g.Topic == topic && g.Group == group {
			return g, true, nil
		}
	}
	return groupView{Topic: topic, Group: group}, false, nil
}

// apiGroups is GET /api/groups[?topic=].
func (s *Server) apiGroups(w http.ResponseWriter, r *http.Request) {
	gs, reporting, err := s.groupViews(r.Context(), r.URL.Query().Get("topic"), false)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"groups": gs, "reporting": reporting, "read_only": s.cfg.ReadOnly})
}

func (s *Server) groupsPage(w http.ResponseWriter, r *http.Request) {
	topic := r.URL.Query().Get("topic")
	gs, reporting, err := s.groupViews(r.Context(), topic, false)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "groups", "Consumer groups", "groups", map[string]any{
		"Groups": gs, "Topic": topic, "Reporting": reporting, "Flash": retireFlash(r.URL.Query()),
	})
}

// retireResult is what POST /api/groups/retire answers: inspect.Retired.
type retireResult struct {
	Topic           string  `json:"topic"`
	Group           string  `json:"group"`
	Queue           string  `json:"queue"`
	Unregistered    bool    `json:"unregistered"`
	Dropped         bool    `json:"dropped"`
	DroppedMessages int64   `json:"dropped_messages"`
	WaitedSecs      float64 `json:"waited_seconds"`
	DeadLetters     int64   `json:"dead_letters"`
	DeadLettersMore bool    `json:"dead_letters_more,omitempty"`
	Parking         bool    `json:"parking"`
	Reregistered    bool    `json:"reregistered,omitempty"`
}

// retire retires group of topic, as `berth groups retire` does.
func (s *Server) retire(ctx context.Context, topic, group string, force bool) (retireResult, error) {
	if s.cfg.ReadOnly {
		return retireResult{}, errReadOnly
	}
	gs := s.groups()
	if gs == nil {
		return retireResult{}, errNoGroups
	}
	if err := checkName("topic", topic); err != nil {
		return retireResult{}, err
	}
	if err := checkName("group", group); err != nil {
		return retireResult{}, err
	}
	if topic == "" {
		return retireResult{}, badInput("topic is required")
	}
	r, err := gs.RetireGroup(ctx, topic, group, inspect.RetireOptions{Force: force})
	res := retireResult{
		Topic: r.Topic, Group: r.Group, Queue: r.Queue, Unregistered: r.Unregistered, Dropped: r.Dropped,
		DroppedMessages: r.DroppedMessages, WaitedSecs: r.Waited.Seconds(), DeadLetters: r.DeadLetters,
		DeadLettersMore: r.DeadLettersMore, Parking: r.Parking, Reregistered: r.Reregistered,
	}
	return res, refusal(err)
}

// refusal words a refused retire for the console (errRefused, 409): the
// inspect errors name the CLI's --force.
func refusal(err error) error {
	var full *inspect.GroupNotEmptyError
	var inUse *inspect.GroupInUseError
	switch {
	case errors.As(err, &full):
		what := "nothing changed"
		if full.Unregistered {
			what = "it is unregistered, its table " + full.Queue + " is kept"
		}
		return fmt.Errorf("%w: group %q of topic %q holds %d message(s) (%d ready, %d delayed, %d in flight); %s; retire with force to drop them",
			errRefused, full.Group, full.Topic, full.Ready+full.Delayed+full.InFlight, full.Ready, full.Delayed, full.InFlight, what)
	case errors.As(err, &inUse):
		l := inUse.Readers[0]
		return fmt.Errorf("%w: group %q of topic %q is read by %d live listener(s), %s (%s) last reported %s; nothing changed; stop them first, or retire with force (they register the group again)",
			errRefused, inUse.Group, inUse.Topic, len(inUse.Readers), l.Instance, l.Name, l.UpdatedAt.UTC().Format(time.RFC3339))
	}
	return err
}

// apiRetire is POST /api/groups/retire with {"topic", "group", "force"}.
func (s *Server) apiRetire(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Topic string `json:"topic"`
		Group string `json:"group"`
		Force bool   `json:"force"`
	}
	if err := decodeJSON(w, r, 1<<16, &req); err != nil {
		s.fail(w, r, badInput("body is not {\"topic\": …, \"group\": …, \"force\": false}: %v", err))
		return
	}
	res, err := s.retire(r.Context(), req.Topic, req.Group, req.Force)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// retirePage handles the retire form: without confirm=yes it shows the
// group's messages and last reader and asks; with it, it retires and
// redirects to the groups with the outcome.
func (s *Server) retirePage(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, badInput("form: %v", err))
		return
	}
	if s.cfg.ReadOnly {
		s.fail(w, r, errReadOnly)
		return
	}
	topic, group, force := r.PostForm.Get("topic"), r.PostForm.Get("group"), r.PostForm.Get("force") == "1"
	if r.PostForm.Get("confirm") != "yes" {
		if group == "" {
			s.fail(w, r, badInput("group is required: the default reader of a topic is no consumer group"))
			return
		}
		g, found, err := s.findGroup(r.Context(), topic, group)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.render(w, r, "retireconfirm", "Retire group "+group, "groups", map[string]any{"G": g, "Found": found, "Force": force})
		return
	}
	res, err := s.retire(r.Context(), topic, group, force)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := url.Values{}
	q.Set("done", "retired")
	q.Set("topic", res.Topic)
	q.Set("group", res.Group)
	q.Set("queue", res.Queue)
	q.Set("dropped", strconv.FormatBool(res.Dropped))
	q.Set("n", strconv.FormatInt(res.DroppedMessages, 10))
	if !res.Unregistered && !res.Dropped {
		q.Set("already", "1")
	}
	if res.Parking {
		q.Set("parking", "1")
	}
	if res.Reregistered {
		q.Set("reregistered", "1")
	}
	http.Redirect(w, r, s.url("/groups?"+q.Encode()), http.StatusSeeOther)
}

// retireFlash is the message of a finished retire.
func retireFlash(q url.Values) string {
	if q.Get("done") != "retired" || q.Get("group") == "" {
		return ""
	}
	group, topic := q.Get("group"), q.Get("topic")
	if q.Get("already") != "" {
		return fmt.Sprintf("Group %s of topic %s: nothing to retire (already retired).", group, topic)
	}
	msg := fmt.Sprintf("Retired group %s of topic %s: publishers stop fanning out to it once their cached subscriptions expire.", group, topic)
	if q.Get("dropped") == "true" {
		msg += fmt.Sprintf(" Dropped %s (%s message(s)).", q.Get("queue"), q.Get("n"))
	}
	if q.Get("parking") != "" {
		msg += fmt.Sprintf(" Topic %s has no group left: its further messages are parked in its default queue.", topic)
	}
	if q.Get("reregistered") != "" {
		msg += " The group was registered again meanwhile: a subscriber of it still runs, or a publisher declares it."
	}
	return msg
}
