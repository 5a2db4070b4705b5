package inspect

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// MessageState selects a queue's messages by state.
type MessageState string

// The states MessagePage browses.
const (
	// StatePending is a message that can be received now (state 0, due),
	// in delivery order: due time, then id.
	StatePending MessageState = "pending"
	// StateDelayed is a message not yet due (a delay, or a retry's
	// backoff), in due order.
	StateDelayed MessageState = "delayed"
	// StateInFlight is a message a consumer holds (fetched or processing),
	// by id. Browsing never takes or changes its lease.
	StateInFlight MessageState = "in_flight"
	// StateAll is every message of the queue, by id.
	StateAll MessageState = "all"
)

// ParseMessageState reads a MessageState; "" is StatePending.
func ParseMessageState(v string) (MessageState, error) {
	switch st := MessageState(v); st {
	case "":
		return StatePending, nil
	case StatePending, StateDelayed, StateInFlight, StateAll:
		return st, nil
	}
	return "", fmt.Errorf("%w: state %q: want pending, delayed, in_flight or all", ErrBadMessageFilter, v)
}

// Message is one message of a queue table, as browsing sees it.
type Message struct {
	ID       string // the queue table's row id
	Queue    string // the queue table
	UUID     string // Watermill message UUID
	State    MessageState
	Attempts int
	// Metadata and Payload are read by Message only; a page has Preview,
	// the first PreviewBytes of the payload, and Size.
	Metadata    map[string]string
	Payload     []byte
	Preview     []byte
	Size        int
	OrderingKey string
	CreatedAt   time.Time
	DueAt       time.Time
	// LeaseUntil is when an in-flight message's lease ends (zero when
	// pending or unknown).
	LeaseUntil time.Time
	// Version is what the row looked like when it was read (its attempts
	// and due time): CancelMessages deletes it only if it is still so.
	Version string
}

// Cancellable reports whether m may be cancelled: it is pending or
// delayed, so no consumer holds it.
func (m Message) Cancellable() bool { return m.State == StatePending || m.State == StateDelayed }

// MessageFilter selects messages of one queue.
type MessageFilter struct {
	// Queue is the queue table or topic (its default queue). Required.
	Queue string
	// State selects by state; "" is StatePending.
	State MessageState
	// UUID, when set, matches the message UUID exactly.
	UUID string
	// Key, when set, matches messages whose metadata has the key; with
	// Value, whose metadata maps Key to exactly Value.
	Key, Value string
}

// searching reports whether f matches more than a state.
func (f MessageFilter) searching() bool { return f.UUID != "" || f.Key != "" }

// MessagePage is one page of a queue's messages.
type MessagePage struct {
	Messages []Message
	// Next is the cursor of the next page; "" when this page is the last.
	Next string
	// Searched is how many messages this page's search read, at most
	// SearchWindow, when it found fewer than a page (0 without UUID or
	// metadata search, or when the page filled). With Partial
	// set, the search stopped there before filling the page: Next goes
	// on from the last message read, and there may be more matches.
	Searched int
	Partial  bool
}

// SearchWindow is how many messages one page of a UUID or metadata search
// reads at most: the queue table has no index on either, so each page is a
// range of at most SearchWindow rows of the index the state is ordered by,
// filtered, and a search through a long queue is several pages.
const SearchWindow = 10_000

// searchWindow is SearchWindow; tests make it smaller.
var searchWindow = SearchWindow

// PreviewBytes is how much of each payload a page carries.
const PreviewBytes = 120

// Errors of browsing and cancelling.
var (
	// ErrBadMessageFilter is returned for a MessageFilter, cursor or id
	// that cannot select anything (a state that does not exist, a cursor
	// not issued for that state, an id that is not a number).
	ErrBadMessageFilter = errors.New("inspect: bad message filter")
	// ErrMessageNotFound is returned by Message for an id the queue table
	// does not have (delivered, cancelled, dead-lettered, never there).
	ErrMessageNotFound = errors.New("inspect: no such message")
	// ErrNotCancellable is returned by CancelMatching for in-flight
	// messages, which a consumer holds.
	ErrNotCancellable = errors.New("inspect: in-flight messages cannot be cancelled")
)

// qb builds a statement with the dialect's placeholders, in the order the
// text is written (SQLite's ? are positional).
type qb struct {
	s    *SQL
	args []any
	now  bool // the statement compares with @now (SQL Server; see text)
}

// text is query as sent: on SQL Server, after the declaration of the
// @now that nowSQL wrote into it, if it did. A statement that references
// a variable is one that forced parameterization (PARAMETERIZATION FORCED
// on the database) leaves alone: otherwise the server would make the
// literal of `state = 0` a parameter, and the filtered pending index would
// no longer match (docs/transports/sqlserver.md, Forced parameterization).
func (b *qb) text(query string) string {
	if !b.now {
		return query
	}
	return sqlServerNow + query
}

// sqlServerNow declares @now, the server's clock as the time columns keep
// it, for the statement that follows (as the transport's idle probes do).
const sqlServerNow = "SET NOCOUNT ON;\nDECLARE @now datetime2(3) = SYSUTCDATETIME();\n"

func (b *qb) arg(v any) string {
	b.args = append(b.args, v)
	return b.s.ph(len(b.args))
}

// timeKey is t as a cursor or version: Unix microseconds (PostgreSQL and
// SQL Server store microseconds and milliseconds) or, on SQLite, the
// stored milliseconds.
func (s *SQL) timeKey(v any) int64 {
	if s.Kind == "sqlite" {
		return toTime(v).UnixMilli()
	}
	return toTime(v).UnixMicro()
}

// timeOfKey is the argument that compares equal to the column value that
// timeKey encoded.
func (s *SQL) timeOfKey(b *qb, k int64) string {
	switch s.Kind {
	case "sqlite":
		return b.arg(k)
	case "sqlserver":
		return "CAST(" + b.arg(time.UnixMicro(k).UTC()) + " AS datetime2(3))"
	}
	return b.arg(time.UnixMicro(k).UTC())
}

// nowSQL is the database's now as the time columns store it: on SQL
// Server the variable @now, which b.text declares.
func (s *SQL) nowSQL(b *qb) string {
	switch s.Kind {
	case "postgres":
		return "now()"
	case "sqlserver":
		b.now = true // declared by b.text
		return "@now"
	}
	return b.arg(s.now().UnixMilli())
}

// stateCond is the WHERE condition of st over the alias-free columns.
func (s *SQL) stateCond(b *qb, st MessageState) string {
	switch st {
	case StatePending:
		return "state = 0 AND due_at <= " + s.nowSQL(b)
	case StateDelayed:
		return "state = 0 AND due_at > " + s.nowSQL(b)
	case StateInFlight:
		return "state <> 0"
	}
	return "1 = 1"
}

// byDue reports whether st's pages are ordered by (due_at, id) — the
// pending index — rather than by id.
func byDue(st MessageState) bool { return st == StatePending || st == StateDelayed }

// cursor is a position in a page order: after (due, id), or after id.
type cursor struct {
	due, id int64
	set     bool
}

func (c cursor) String(st MessageState) string {
	if byDue(st) {
		return "d" + strconv.FormatInt(c.due, 10) + "." + strconv.FormatInt(c.id, 10)
	}
	return strconv.FormatInt(c.id, 10)
}

func parseCursor(v string, st MessageState) (cursor, error) {
	if v == "" {
		return cursor{}, nil
	}
	bad := fmt.Errorf("%w: cursor %.40q is not one of this state's pages", ErrBadCursor, v)
	if byDue(st) {
		rest, ok := strings.CutPrefix(v, "d")
		due, id, ok2 := strings.Cut(rest, ".")
		if !ok || !ok2 {
			return cursor{}, bad
		}
		d, err1 := strconv.ParseInt(due, 10, 64)
		n, err2 := strconv.ParseInt(id, 10, 64)
		if err1 != nil || err2 != nil || n < 0 {
			return cursor{}, bad
		}
		return cursor{due: d, id: n, set: true}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return cursor{}, bad
	}
	return cursor{id: n, set: true}, nil
}

// keysetCond is "after c" in st's order. For (due_at, id) it repeats
// due_at >= so that the database reads a range of the pending index.
func (s *SQL) keysetCond(b *qb, st MessageState, c cursor) string {
	if !c.set {
		return "1 = 1"
	}
	if byDue(st) {
		ge := s.timeOfKey(b, c.due)
		gt := s.timeOfKey(b, c.due)
		eq := s.timeOfKey(b, c.due)
		return "due_at >= " + ge + " AND (due_at > " + gt + " OR (due_at = " + eq + " AND id > " + b.arg(c.id) + "))"
	}
	return "id > " + b.arg(c.id)
}

func orderBy(st MessageState, desc bool) string {
	d := ""
	if desc {
		d = " DESC"
	}
	if byDue(st) {
		return "due_at" + d + ", id" + d
	}
	return "id" + d
}

// matchCond is f's UUID and metadata match over a row's columns; "" when
// f does not search.
func (s *SQL) matchCond(b *qb, f MessageFilter) string {
	var conds []string
	if f.UUID != "" {
		conds = append(conds, "uuid = "+b.arg(f.UUID))
	}
	if f.Key != "" {
		switch s.Kind {
		case "postgres":
			if f.Value == "" {
				conds = append(conds, "(headers::jsonb ->> "+b.arg(f.Key)+") IS NOT NULL")
			} else {
				k := b.arg(f.Key)
				conds = append(conds, "(headers::jsonb ->> "+k+") = "+b.arg(f.Value))
			}
		case "sqlserver":
			c := "ISJSON(headers) = 1 AND EXISTS (SELECT 1 FROM OPENJSON(headers) AS j WHERE j.[key] = " + b.arg(f.Key)
			if f.Value != "" {
				c += " AND j.[value] = " + b.arg(f.Value)
			}
			conds = append(conds, c+")")
		default:
			c := "json_valid(headers) AND EXISTS (SELECT 1 FROM json_each(headers) AS j WHERE j.key = " + b.arg(f.Key)
			if f.Value != "" {
				c += " AND j.type = 'text' AND j.value = " + b.arg(f.Value)
			}
			conds = append(conds, c+")")
		}
	}
	return strings.Join(conds, " AND ")
}

// limited is a SELECT of cols from `from` with where and order, at most n
// rows, in the dialect's syntax.
func (s *SQL) limited(cols, from, where, order string, n int) string {
	if s.Kind == "sqlserver" {
		return "SELECT TOP (" + strconv.Itoa(n) + ") " + cols + " FROM " + from + " WHERE " + where + " ORDER BY " + order
	}
	return "SELECT " + cols + " FROM " + from + " WHERE " + where + " ORDER BY " + order + " LIMIT " + strconv.Itoa(n)
}

func (s *SQL) lengthFn() string {
	switch s.Kind {
	case "postgres":
		return "octet_length"
	case "sqlserver":
		return "DATALENGTH"
	}
	return "length"
}

func (s *SQL) substrFn() string {
	if s.Kind == "sqlserver" {
		return "SUBSTRING"
	}
	return "substr"
}

// resolveQueue finds the queue table of name (a table name, or a topic,
// meaning its default queue), which must exist.
func (s *SQL) resolveQueue(ctx context.Context, name string) (sqlqueue.Queue, error) {
	if name == "" {
		return sqlqueue.Queue{}, fmt.Errorf("%w: no queue given", ErrBadMessageFilter)
	}
	subs, err := s.subscriptions(ctx)
	if err != nil {
		return sqlqueue.Queue{}, err
	}
	tables, err := s.queueTables(ctx)
	if err != nil {
		return sqlqueue.Queue{}, err
	}
	has := map[string]bool{}
	for _, t := range tables {
		has[t] = true
	}
	for _, sub := range subs {
		if (sub.Name == name || (sub.Topic == name && sub.Group == "")) && has[sub.Name] {
			return sub, nil
		}
	}
	if byTopic := sqlqueue.QueueFor(s.Dialect, s.Tables, name, "").Name; has[byTopic] {
		return s.queueByName(byTopic), nil
	}
	if has[name] {
		return s.queueByName(name), nil
	}
	return sqlqueue.Queue{}, fmt.Errorf("%w: %q is no queue table here", transport.ErrQueueNotFound, name)
}

// messageCols are the columns a page reads: no headers, a preview of the
// body and its size.
func (s *SQL) messageCols(full bool) string {
	if full {
		return "id, uuid, state, attempts, created_at, due_at, lease_until, ordering_key, headers, body"
	}
	return "id, uuid, state, attempts, created_at, due_at, lease_until, ordering_key, " +
		s.lengthFn() + "(body), " + s.substrFn() + "(body, 1, " + strconv.Itoa(PreviewBytes) + ")"
}

// scanMessage scans messageCols into a Message of queue at now.
func (s *SQL) scanMessage(rows *sql.Rows, queue string, full bool, now time.Time) (Message, error) {
	var m Message
	var id int64
	var state int
	var created, due, lease any
	var key sql.NullString
	var err error
	if full {
		var headers string
		err = rows.Scan(&id, &m.UUID, &state, &m.Attempts, &created, &due, &lease, &key, &headers, &m.Payload)
		m.Size = len(m.Payload)
		m.Metadata = map[string]string{}
		_ = json.Unmarshal([]byte(headers), &m.Metadata)
	} else {
		var size sql.NullInt64
		err = rows.Scan(&id, &m.UUID, &state, &m.Attempts, &created, &due, &lease, &key, &size, &m.Preview)
		m.Size = int(size.Int64)
	}
	if err != nil {
		return Message{}, err
	}
	m.ID, m.Queue, m.OrderingKey = strconv.FormatInt(id, 10), queue, key.String
	m.CreatedAt, m.DueAt = toTime(created).UTC(), toTime(due).UTC()
	if lease != nil {
		m.LeaseUntil = toTime(lease).UTC()
	}
	switch {
	case state != 0:
		m.State = StateInFlight
	case m.DueAt.After(now):
		m.State = StateDelayed
	default:
		m.State = StatePending
	}
	m.Version = strconv.Itoa(m.Attempts) + "." + strconv.FormatInt(s.timeKey(due), 10)
	return m, nil
}

// MessagePage returns at most limit (1 to 1000) messages of f's queue in
// f's state, after the cursor (a MessagePage's Next; "" for the first
// page). Pages are keyset pages: pending and delayed messages in delivery
// order on the pending index (due_at, id), in-flight and all messages by
// id, so each page is one range read however deep, and OFFSET is never
// used. A UUID or metadata search reads at most SearchWindow messages per
// page (see MessagePage.Partial). It only reads: no lease is taken, no
// row is locked or changed.
func (s *SQL) MessagePage(ctx context.Context, f MessageFilter, cur string, limit int) (MessagePage, error) {
	if limit < 1 || limit > 1000 {
		return MessagePage{}, fmt.Errorf("%w: page size %d is not 1 to 1000", ErrBadCursor, limit)
	}
	st, err := ParseMessageState(string(f.State))
	if err != nil {
		return MessagePage{}, err
	}
	c, err := parseCursor(cur, st)
	if err != nil {
		return MessagePage{}, err
	}
	q, err := s.resolveQueue(ctx, f.Queue)
	if err != nil {
		return MessagePage{}, err
	}
	now := s.now()
	b := &qb{s: s}
	where := s.stateCond(b, st) + " AND " + s.keysetCond(b, st, c)
	var query string
	if !f.searching() {
		query = s.limited(s.messageCols(false), q.Table, where, orderBy(st, false), limit+1)
	} else {
		inner := s.limited("*", q.Table, where, orderBy(st, false), searchWindow)
		query = s.limited(s.messageCols(false), "("+inner+") AS w", s.matchCond(b, f), orderBy(st, false), limit+1)
	}
	rows, err := s.DB.QueryContext(ctx, b.text(query), b.args...)
	if err != nil {
		return MessagePage{}, fmt.Errorf("read messages of %s: %w", q.Name, err)
	}
	var p MessagePage
	var last cursor
	for rows.Next() {
		m, err := s.scanMessage(rows, q.Name, false, now)
		if err != nil {
			_ = rows.Close()
			return MessagePage{}, err
		}
		if len(p.Messages) == limit {
			p.Next = last.String(st)
			break
		}
		p.Messages = append(p.Messages, m)
		id, _ := strconv.ParseInt(m.ID, 10, 64)
		last = cursor{due: s.timeKeyOf(m.DueAt), id: id, set: true}
	}
	if err := rows.Close(); err != nil {
		return MessagePage{}, err
	}
	if err := rows.Err(); err != nil {
		return MessagePage{}, err
	}
	if f.searching() && p.Next == "" {
		// Fewer matches than a page: did the window end the search or
		// the queue? The window's size and its last position say.
		n, end, err := s.windowEnd(ctx, q, st, c)
		if err != nil {
			return MessagePage{}, err
		}
		p.Searched = n
		if n >= searchWindow {
			p.Partial, p.Next = true, end.String(st)
		}
	}
	return p, nil
}

// timeKeyOf is timeKey of a time already scanned.
func (s *SQL) timeKeyOf(t time.Time) int64 {
	if s.Kind == "sqlite" {
		return t.UnixMilli()
	}
	return t.UnixMicro()
}

// windowEnd returns how many rows the search window after c holds (at
// most SearchWindow) and the position of its last row.
func (s *SQL) windowEnd(ctx context.Context, q sqlqueue.Queue, st MessageState, c cursor) (int, cursor, error) {
	b := &qb{s: s}
	where := s.stateCond(b, st) + " AND " + s.keysetCond(b, st, c)
	inner := s.limited("id, due_at", q.Table, where, orderBy(st, false), searchWindow)
	var query string
	if byDue(st) {
		query = `WITH w AS (` + inner + `)
SELECT (SELECT count(*) FROM w), m.due_at, (SELECT max(id) FROM w WHERE w.due_at = m.due_at) FROM (SELECT max(due_at) AS due_at FROM w) AS m`
	} else {
		query = `WITH w AS (` + inner + `) SELECT count(*), NULL, max(id) FROM w`
	}
	var n int
	var due any
	var id sql.NullInt64
	if err := s.DB.QueryRowContext(ctx, b.text(query), b.args...).Scan(&n, &due, &id); err != nil {
		return 0, cursor{}, fmt.Errorf("read messages of %s: %w", q.Name, err)
	}
	end := cursor{id: id.Int64, set: true}
	if due != nil {
		end.due = s.timeKey(due)
	}
	return n, end, nil
}

// Message returns one message of queue (a table or topic) by its row id,
// with its metadata and payload, whatever its state. It only reads.
func (s *SQL) Message(ctx context.Context, queue, id string) (Message, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n < 1 {
		return Message{}, fmt.Errorf("%w: message id %.40q is not a number", ErrBadMessageFilter, id)
	}
	q, err := s.resolveQueue(ctx, queue)
	if err != nil {
		return Message{}, err
	}
	b := &qb{s: s}
	query := `SELECT ` + s.messageCols(true) + ` FROM ` + q.Table + ` WHERE id = ` + b.arg(n)
	rows, err := s.DB.QueryContext(ctx, query, b.args...)
	if err != nil {
		return Message{}, fmt.Errorf("read message %d of %s: %w", n, q.Name, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Message{}, err
		}
		return Message{}, fmt.Errorf("%w: %s has no message %d (delivered, cancelled or dead-lettered?)", ErrMessageNotFound, q.Name, n)
	}
	return s.scanMessage(rows, q.Name, true, s.now())
}

// MessageRef names a message as it was seen: its id and Version.
type MessageRef struct {
	ID, Version string
}

// CancelResult reports a cancel: how many were asked for (or matched),
// how many this call deleted, and why the others were not.
type CancelResult struct {
	// Requested is how many messages were named, or matched at the scan
	// of CancelMatching.
	Requested int
	// Cancelled are the ids deleted.
	Cancelled []string
	// Changed are ids still in the queue but no longer as seen: claimed by
	// a consumer (in flight), or released and rescheduled since. They were
	// left alone.
	Changed []string
	// Gone are ids no longer in the queue: delivered, cancelled or
	// dead-lettered meanwhile.
	Gone []string
}

// cancelBatch is how many rows one fenced DELETE names.
const cancelBatch = 200

type versioned struct {
	id, attempts, due int64
}

func parseRef(r MessageRef) (versioned, error) {
	id, err := strconv.ParseInt(r.ID, 10, 64)
	if err != nil || id < 1 {
		return versioned{}, fmt.Errorf("%w: message id %.40q is not a number", ErrBadMessageFilter, r.ID)
	}
	a, d, ok := strings.Cut(r.Version, ".")
	att, err1 := strconv.ParseInt(a, 10, 64)
	due, err2 := strconv.ParseInt(d, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return versioned{}, fmt.Errorf("%w: version %.40q of message %d is not one this console issued", ErrBadMessageFilter, r.Version, id)
	}
	return versioned{id: id, attempts: att, due: due}, nil
}

// CancelMessages deletes the named messages of queue, each only if it is
// still pending or delayed and still as seen (its Version: attempts and
// due time): a message a consumer claimed meanwhile (in flight), or that
// was retried and rescheduled, is left alone and reported Changed; one
// already gone is reported Gone. The fence is the DELETE's own WHERE
// clause, which the database re-checks on the row's current version after
// waiting for a concurrent claim, so a claim and a cancel never both win.
func (s *SQL) CancelMessages(ctx context.Context, queue string, refs []MessageRef) (CancelResult, error) {
	vs := make([]versioned, 0, len(refs))
	for _, r := range refs {
		v, err := parseRef(r)
		if err != nil {
			return CancelResult{}, err
		}
		vs = append(vs, v)
	}
	q, err := s.resolveQueue(ctx, queue)
	if err != nil {
		return CancelResult{}, err
	}
	res := CancelResult{Requested: len(vs)}
	err = s.cancelFenced(ctx, q, vs, &res)
	s.promoteHeads(ctx, q, res)
	return res, err
}

// promoteHeads makes claimable the rows that a cancel left at the head of
// their ordering key while they wait behind it (see
// sqlqueue.HeadPromoter): a cancel hands nothing off, so they
// would otherwise wait for the queue's next sweep. An error is dropped:
// that sweep promotes them.
func (s *SQL) promoteHeads(ctx context.Context, q sqlqueue.Queue, res CancelResult) {
	hp, ok := s.Dialect.(sqlqueue.HeadPromoter)
	if !ok || len(res.Cancelled) == 0 {
		return
	}
	_ = s.exec(ctx, s.DB, hp.PromoteHeads(q, promoteLimit))
}

// promoteLimit bounds the rows one promotion after a cancel changes.
const promoteLimit = 10_000

// cancelFenced deletes vs (as seen) from q, cancelBatch at a time, and
// sorts each into res.
func (s *SQL) cancelFenced(ctx context.Context, q sqlqueue.Queue, vs []versioned, res *CancelResult) error {
	for len(vs) > 0 {
		n := min(len(vs), cancelBatch)
		batch := vs[:n]
		vs = vs[n:]
		b := &qb{s: s}
		ors := make([]string, len(batch))
		for i, v := range batch {
			ors[i] = "(id = " + b.arg(v.id) + " AND attempts = " + b.arg(v.attempts) + " AND due_at = " + s.timeOfKey(b, v.due) + ")"
		}
		where := "state = 0 AND (" + strings.Join(ors, " OR ") + ")"
		query := `DELETE FROM ` + q.Table + ` WHERE ` + where + ` RETURNING id`
		if s.Kind == "sqlserver" {
			query = `DELETE FROM ` + q.Table + ` OUTPUT deleted.id WHERE ` + where
		}
		deleted, err := s.ids(ctx, query, b.args)
		if err != nil {
			return fmt.Errorf("cancel messages of %s: %w", q.Name, err)
		}
		var left []any
		for _, v := range batch {
			if deleted[v.id] {
				res.Cancelled = append(res.Cancelled, strconv.FormatInt(v.id, 10))
			} else {
				left = append(left, v.id)
			}
		}
		if len(left) == 0 {
			continue
		}
		b = &qb{s: s}
		ph := make([]string, len(left))
		for i, id := range left {
			ph[i] = b.arg(id)
		}
		still, err := s.ids(ctx, `SELECT id FROM `+q.Table+` WHERE id IN (`+strings.Join(ph, ", ")+`)`, b.args)
		if err != nil {
			return fmt.Errorf("cancel messages of %s: %w", q.Name, err)
		}
		for _, id := range left {
			if still[id.(int64)] {
				res.Changed = append(res.Changed, strconv.FormatInt(id.(int64), 10))
			} else {
				res.Gone = append(res.Gone, strconv.FormatInt(id.(int64), 10))
			}
		}
	}
	return nil
}

// ids runs query and returns the ids it answers.
func (s *SQL) ids(ctx context.Context, query string, args []any) (map[int64]bool, error) {
	rows, err := s.DB.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// cancelState is the state CancelMatching and CountCancellable select:
// pending, delayed, or both (StateAll); in-flight is refused.
func cancelState(st MessageState) (MessageState, error) {
	st, err := ParseMessageState(string(st))
	if err != nil {
		return "", err
	}
	if st == StateInFlight {
		return "", ErrNotCancellable
	}
	return st, nil
}

// Cancellable is what CountCancellable found: how many messages a
// CancelMatching of the same filter with UpTo would take at most.
type Cancellable struct {
	Queue string // the queue table
	N     int64
	// UpTo is the queue's highest id when counted: pass it to
	// CancelMatching so that messages published after the count are left
	// alone.
	UpTo int64
}

// CountCancellable counts the pending or delayed messages (f.State:
// pending, delayed, or all for both) f selects, for the confirmation of a
// cancel of all of them. Counting reads each matching index entry once
// (and, with a UUID or metadata search, each row of the state).
func (s *SQL) CountCancellable(ctx context.Context, f MessageFilter) (Cancellable, error) {
	st, err := cancelState(f.State)
	if err != nil {
		return Cancellable{}, err
	}
	q, err := s.resolveQueue(ctx, f.Queue)
	if err != nil {
		return Cancellable{}, err
	}
	var upTo sql.NullInt64
	if err := s.DB.QueryRowContext(ctx, `SELECT max(id) FROM `+q.Table).Scan(&upTo); err != nil {
		return Cancellable{}, fmt.Errorf("count messages of %s: %w", q.Name, err)
	}
	b := &qb{s: s}
	where := "state = 0"
	if st != StateAll {
		where = s.stateCond(b, st)
	}
	where += " AND id <= " + b.arg(upTo.Int64)
	if m := s.matchCond(b, f); m != "" {
		where += " AND " + m
	}
	var n int64
	if err := s.DB.QueryRowContext(ctx, b.text(`SELECT count(*) FROM `+q.Table+` WHERE `+where), b.args...).Scan(&n); err != nil {
		return Cancellable{}, fmt.Errorf("count messages of %s: %w", q.Name, err)
	}
	return Cancellable{Queue: q.Name, N: n, UpTo: upTo.Int64}, nil
}

// purgeWindow is how many rows of the queue CancelMatching reads per
// round: a range of the primary key, of which it deletes the matching
// pending or delayed rows, fenced as CancelMessages.
const purgeWindow = 1000

// CancelMatching deletes every pending or delayed message f selects
// (f.State: pending, delayed, or all for both; in-flight messages are
// never cancelled) whose id is at most upTo (Cancellable.UpTo; messages
// published later are left alone). It walks the queue by id,
// purgeWindow rows per round, and deletes each round's matches as
// CancelMessages does: a message claimed between the round's read and its
// DELETE is left alone and reported Changed. Requested is how many it
// matched.
func (s *SQL) CancelMatching(ctx context.Context, f MessageFilter, upTo int64) (CancelResult, error) {
	st, err := cancelState(f.State)
	if err != nil {
		return CancelResult{}, err
	}
	q, err := s.resolveQueue(ctx, f.Queue)
	if err != nil {
		return CancelResult{}, err
	}
	var res CancelResult
	after := int64(0)
	for after < upTo {
		// The flag comes first in the statement's text, so its
		// arguments go first (SQLite's placeholders are positional).
		b := &qb{s: s}
		cond := "state = 0"
		if st != StateAll {
			cond = s.stateCond(b, st)
		}
		if m := s.matchCond(b, f); m != "" {
			cond += " AND " + m
		}
		where := "id > " + b.arg(after) + " AND id <= " + b.arg(upTo)
		query := s.limited("id, attempts, due_at, CASE WHEN "+cond+" THEN 1 ELSE 0 END", q.Table, where, "id", purgeWindow)
		rows, err := s.DB.QueryContext(ctx, b.text(query), b.args...)
		if err != nil {
			return res, fmt.Errorf("cancel messages of %s: %w", q.Name, err)
		}
		var vs []versioned
		last := int64(0)
		for rows.Next() {
			var v versioned
			var due any
			var hit int
			if err := rows.Scan(&v.id, &v.attempts, &due, &hit); err != nil {
				_ = rows.Close()
				return res, err
			}
			last = v.id
			if hit == 1 {
				v.due = s.timeKey(due)
				vs = append(vs, v)
			}
		}
		if err := rows.Close(); err != nil {
			return res, err
		}
		if last == 0 {
			break
		}
		after = last
		res.Requested += len(vs)
		if err := s.cancelFenced(ctx, q, vs, &res); err != nil {
			s.promoteHeads(ctx, q, res)
			return res, err
		}
	}
	s.promoteHeads(ctx, q, res)
	return res, nil
}

// CountDead counts the dead letters f selects, for the confirmation of an
// action on all of them.
func (s *SQL) CountDead(ctx context.Context, f Filter) (int64, error) {
	if err := checkIDs(f); err != nil {
		return 0, err
	}
	subs, err := s.subscriptions(ctx)
	if err != nil {
		return 0, err
	}
	if f.Queue != "" {
		if err := s.checkQueue(ctx, f.Queue, subs); err != nil {
			return 0, err
		}
	}
	dq := s.deadFilter(f, subs, s.now())
	if dq.none {
		return 0, nil
	}
	query := `SELECT count(*) FROM ` + s.Names.Errors
	if len(dq.where) > 0 {
		query += ` WHERE ` + strings.Join(dq.where, ` AND `)
	}
	var n int64
	if err := s.DB.QueryRowContext(ctx, query, dq.args...).Scan(&n); err != nil {
		if s.tableMissing(ctx, s.Names.ErrorsName, err) {
			return 0, nil
		}
		return 0, fmt.Errorf("count dead letters: %w", err)
	}
	return n, nil
}
