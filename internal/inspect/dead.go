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

	"github.com/berth-go/berth/transport/sqlqueue"
)

// errRow is a dead letter with its queue's topic, for filtering.
type errRow struct {
	DeadLetter
	id      int64
	topic   string
	headers string
}

// settleBatch is how many error rows Replay and Purge read, claim and move
// per transaction.
const settleBatch = 200

// deadQuery is a dead-letter selection as SQL: a WHERE clause over the
// error table and its arguments. none is true when the filter can match
// nothing (ids that are not numbers).
type deadQuery struct {
	where []string
	args  []any
	none  bool
}

func (q *deadQuery) add(s *SQL, cond string, args ...any) {
	for _, a := range args {
		q.args = append(q.args, a)
		cond = strings.Replace(cond, "?", s.ph(len(q.args)), 1)
	}
	q.where = append(q.where, cond)
}

// timeArg is t as the error table's failed_at column stores it.
func (s *SQL) timeArg(t time.Time) any {
	switch s.Kind {
	case "sqlite":
		return t.UnixMilli()
	default:
		return t.UTC()
	}
}

// likeEscape escapes LIKE's wildcards (with the escape character \).
var likeEscape = strings.NewReplacer(`\`, `\\`, `_`, `\_`, `%`, `\%`)

// deadFilter translates f into SQL over the error table, so that the
// database selects (by id, queue_table and failed_at, which are indexed)
// instead of the client reading every row. now anchors OlderThan and
// NewerThan.
func (s *SQL) deadFilter(f Filter, subs []sqlqueue.Queue, now time.Time) deadQuery {
	var q deadQuery
	if f.Queue != "" {
		names := []string{f.Queue, sqlqueue.QueueFor(s.Dialect, s.Tables, f.Queue, "").Name}
		for _, sub := range subs {
			if sub.Topic == f.Queue {
				names = append(names, sub.Name)
			}
		}
		args := make([]any, len(names))
		for i, n := range names {
			args[i] = n
		}
		q.add(s, "queue_table IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(names)), ", ")+")", args...)
	}
	if f.Reason != "" {
		pattern := "%" + likeEscape.Replace(strings.ToLower(f.Reason)) + "%"
		if s.Kind == "postgres" {
			// ILIKE on the column itself, so the planner estimates from
			// the reason column's statistics (LOWER(reason) has none and
			// is guessed at 0.01%, which sorts the whole table instead of
			// walking the id index until a page is full).
			q.add(s, `reason ILIKE ? ESCAPE '\'`, pattern)
		} else {
			q.add(s, `LOWER(reason) LIKE ? ESCAPE '\'`, pattern)
		}
	}
	if f.OlderThan > 0 {
		q.add(s, "failed_at <= ?", s.timeArg(now.Add(-f.OlderThan)))
	}
	if f.NewerThan > 0 {
		q.add(s, "failed_at >= ?", s.timeArg(now.Add(-f.NewerThan)))
	}
	if !f.Since.IsZero() {
		q.add(s, "failed_at >= ?", s.timeArg(f.Since))
	}
	if !f.Until.IsZero() {
		q.add(s, "failed_at < ?", s.timeArg(f.Until))
	}
	if len(f.IDs) > 0 {
		var ids []any
		for _, id := range f.IDs {
			if n, err := strconv.ParseInt(id, 10, 64); err == nil {
				ids = append(ids, n)
			}
		}
		if len(ids) == 0 {
			q.none = true
			return q
		}
		q.add(s, "id IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")+")", ids...)
	}
	return q
}

// deadSelect is selectDead's statement: the error rows f selects with
// after < id ≤ upTo, in id order, at most limit. none reports a filter that
// can match nothing.
func (s *SQL) deadSelect(f Filter, subs []sqlqueue.Queue, now time.Time, after, upTo int64, limit int) (query string, args []any, none bool) {
	q := s.deadFilter(f, subs, now)
	if q.none {
		return "", nil, true
	}
	if after > 0 {
		q.add(s, "id > ?", after)
	}
	if upTo > 0 {
		q.add(s, "id <= ?", upTo)
	}
	cols := `id, queue_table, message_uuid, headers, body, attempts, reason, failed_at`
	query = `SELECT ` + cols + ` FROM ` + s.Names.Errors
	if limit > 0 && s.Kind == "sqlserver" {
		query = `SELECT TOP (` + strconv.Itoa(limit) + `) ` + cols + ` FROM ` + s.Names.Errors
	}
	if len(q.where) > 0 {
		query += ` WHERE ` + strings.Join(q.where, ` AND `)
	}
	query += ` ORDER BY id`
	if limit > 0 && s.Kind != "sqlserver" {
		query += ` LIMIT ` + strconv.Itoa(limit)
	}
	return query, q.args, false
}

// ErrBadID is returned for a dead-letter id the deployment cannot have
// issued (SQL: not a number), rather than matching nothing.
var ErrBadID = errors.New("inspect: bad dead-letter id")

// checkIDs returns an error wrapping ErrBadID for an id of f that is not
// an error row's id.
func checkIDs(f Filter) error {
	for _, id := range f.IDs {
		if n, err := strconv.ParseInt(id, 10, 64); err != nil || n < 1 {
			return fmt.Errorf("%w: %q is not a number", ErrBadID, id)
		}
	}
	return nil
}

// selectDead reads the error rows f selects with after < id ≤ upTo (upTo
// 0: no upper bound), in id order, at most limit (all when limit ≤ 0). It
// also returns the last id it read, for keyset paging.
func (s *SQL) selectDead(ctx context.Context, f Filter, after, upTo int64, limit int) ([]errRow, int64, error) {
	if err := checkIDs(f); err != nil {
		return nil, 0, err
	}
	subs, err := s.subscriptions(ctx)
	if err != nil {
		return nil, 0, err
	}
	if f.Queue != "" {
		if err := s.checkQueue(ctx, f.Queue, subs); err != nil {
			return nil, 0, err
		}
	}
	topics := map[string]string{}
	for _, q := range subs {
		topics[q.Name] = q.Topic
	}
	now := s.now()
	query, args, none := s.deadSelect(f, subs, now, after, upTo, limit)
	if none {
		return nil, 0, nil
	}
	rows, err := s.DB.QueryContext(ctx, query, args...)
	if err != nil {
		if s.tableMissing(ctx, s.Names.ErrorsName, err) {
			return nil, 0, nil
		}
		return nil, 0, fmt.Errorf("read dead letters: %w", err)
	}
	defer rows.Close()
	var out []errRow
	last := int64(0)
	for rows.Next() {
		var r errRow
		var failed any
		if err := rows.Scan(&r.id, &r.Queue, &r.UUID, &r.headers, &r.Payload, &r.Attempts, &r.Reason, &failed); err != nil {
			return nil, 0, err
		}
		last = r.id
		r.ID = strconv.FormatInt(r.id, 10)
		r.FailedAt = toTime(failed)
		r.topic = topics[r.Queue]
		r.Metadata = map[string]string{}
		_ = json.Unmarshal([]byte(r.headers), &r.Metadata)
		// The database selected; Match only guards against collations
		// that fold case differently from Go.
		if f.Match(r.DeadLetter, now, r.topic) {
			out = append(out, r)
		}
	}
	return out, last, rows.Err()
}

// DeadLetters implements Inspector.
func (s *SQL) DeadLetters(ctx context.Context, f Filter, limit int) ([]DeadLetter, error) {
	rs, _, err := s.selectDead(ctx, f, 0, 0, limit)
	return plainRows(rs), err
}

// ErrBadCursor is returned by DeadLetterPage for a cursor it did not issue.
var ErrBadCursor = errors.New("inspect: bad page cursor")

// Page is one page of dead letters, oldest (lowest id) first.
type Page struct {
	DeadLetters []DeadLetter
	// Next is the cursor of the next page; "" when this page is the last.
	Next string
}

// DeadLetterPage returns at most limit (1 to 1000) dead letters that f
// selects, after the cursor (a Page's Next; "" for the first page). Pages
// are keyset pages on the error table's id: each is one indexed range
// read, however deep, and rows added or removed meanwhile never shift a
// page.
func (s *SQL) DeadLetterPage(ctx context.Context, f Filter, cursor string, limit int) (Page, error) {
	if limit < 1 || limit > 1000 {
		return Page{}, fmt.Errorf("%w: page size %d is not 1 to 1000", ErrBadCursor, limit)
	}
	after := int64(0)
	if cursor != "" {
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n < 0 {
			return Page{}, fmt.Errorf("%w: %q", ErrBadCursor, cursor)
		}
		after = n
	}
	rs, last, err := s.selectDead(ctx, f, after, 0, limit)
	if err != nil {
		return Page{}, err
	}
	p := Page{DeadLetters: plainRows(rs)}
	if last > 0 && len(rs) == limit {
		p.Next = strconv.FormatInt(last, 10)
	}
	return p, nil
}

// maxDeadID is the error table's highest id now: Replay and Purge stop
// there, so that messages dead-lettered again while they run (a replayed
// message failing at once) are not taken up a second time.
func (s *SQL) maxDeadID(ctx context.Context) (int64, error) {
	var n sql.NullInt64
	if err := s.DB.QueryRowContext(ctx, `SELECT max(id) FROM `+s.Names.Errors).Scan(&n); err != nil {
		if s.tableMissing(ctx, s.Names.ErrorsName, err) {
			return 0, nil
		}
		return 0, fmt.Errorf("read dead letters: %w", err)
	}
	return n.Int64, nil
}

// settle runs fn on the selected rows, settleBatch at a time, each batch in
// one transaction that first claims its rows (claimDead) and passes fn only
// those it claimed. It returns what was claimed, without payloads.
func (s *SQL) settle(ctx context.Context, f Filter, fn func(tx *sql.Tx, claimed []errRow) error) ([]DeadLetter, error) {
	upTo, err := s.maxDeadID(ctx)
	if err != nil || upTo == 0 {
		return nil, err
	}
	var done []DeadLetter
	after := int64(0)
	for {
		rs, last, err := s.selectDead(ctx, f, after, upTo, settleBatch)
		if err != nil {
			return done, err
		}
		if last == 0 {
			return done, nil
		}
		after = last
		if len(rs) == 0 {
			continue
		}
		var claimed []errRow
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			var err error
			if claimed, err = s.claimDead(ctx, tx, rs); err != nil {
				return err
			}
			if len(claimed) == 0 {
				return nil
			}
			return fn(tx, claimed)
		})
		if err != nil {
			return done, err
		}
		for _, r := range claimed {
			r.Payload = nil
			done = append(done, r.DeadLetter)
		}
	}
}

// claimDead deletes rs from the error table and returns those this
// transaction deleted: the fence of Replay and Purge. A row that a
// concurrent replay or purge took first is not returned (the DELETE waits
// for that transaction and then finds nothing), so no dead letter is moved
// or counted twice; if the caller dies before it commits, the rows stay.
func (s *SQL) claimDead(ctx context.Context, tx *sql.Tx, rs []errRow) ([]errRow, error) {
	ph := make([]string, len(rs))
	args := make([]any, len(rs))
	for i, r := range rs {
		ph[i], args[i] = s.ph(i+1), r.id
	}
	in := `id IN (` + strings.Join(ph, ", ") + `)`
	var q string
	if s.Kind == "sqlserver" {
		q = `DELETE FROM ` + s.Names.Errors + ` OUTPUT deleted.id WHERE ` + in
	} else {
		q = `DELETE FROM ` + s.Names.Errors + ` WHERE ` + in + ` RETURNING id`
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("claim dead letters: %w", err)
	}
	defer rows.Close()
	got := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		got[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []errRow
	for _, r := range rs {
		if got[r.id] {
			out = append(out, r)
		}
	}
	return out, nil
}

// checkFilter returns an error wrapping transport.ErrQueueNotFound when f
// names a queue that does not exist.
func (s *SQL) checkFilter(ctx context.Context, f Filter) error {
	if f.Queue == "" {
		return nil
	}
	subs, err := s.subscriptions(ctx)
	if err != nil {
		return err
	}
	return s.checkQueue(ctx, f.Queue, subs)
}

// Purge implements Inspector: it deletes the selected rows of the error
// table, through the same claim as Replay, and returns those it deleted
// (without payloads).
func (s *SQL) Purge(ctx context.Context, f Filter, dryRun bool) ([]DeadLetter, error) {
	if dryRun {
		return s.DeadLetters(ctx, f, 0)
	}
	if err := checkIDs(f); err != nil {
		return nil, err
	}
	if err := s.checkFilter(ctx, f); err != nil {
		return nil, err
	}
	done, err := s.settle(ctx, f, func(*sql.Tx, []errRow) error { return nil })
	if err != nil {
		return done, fmt.Errorf("purge: %w", err)
	}
	return done, nil
}

// Replay implements Inspector: ReplayDelayed with no delay.
func (s *SQL) Replay(ctx context.Context, f Filter, dryRun bool) ([]DeadLetter, error) {
	if dryRun {
		return s.DeadLetters(ctx, f, 0)
	}
	return s.ReplayDelayed(ctx, f, 0)
}

// ReplayDelayed moves the selected rows back to their queue tables as new
// messages (same UUID, metadata and payload; attempts from zero; due after
// delay) and deletes them from the error table: each batch is one
// transaction that claims its rows first (claimDead), so two replays at
// once, or a replay and a purge, never move a dead letter twice, and a
// replay cut short moves nothing it did not also delete. Rows dead-lettered
// after the replay started are left alone. A queue table that no longer
// exists fails the replay of its rows, which stay in the error table. It
// returns what it moved, without payloads.
func (s *SQL) ReplayDelayed(ctx context.Context, f Filter, delay time.Duration) ([]DeadLetter, error) {
	if delay < 0 {
		return nil, fmt.Errorf("replay: negative delay %s", delay)
	}
	if err := checkIDs(f); err != nil {
		return nil, err
	}
	subs, err := s.subscriptions(ctx)
	if err != nil {
		return nil, err
	}
	if f.Queue != "" {
		if err := s.checkQueue(ctx, f.Queue, subs); err != nil {
			return nil, err
		}
	}
	queues := map[string]sqlqueue.Queue{}
	for _, q := range subs {
		queues[q.Name] = q
	}
	done, err := s.settle(ctx, f, func(tx *sql.Tx, claimed []errRow) error {
		byQueue := map[string][]sqlqueue.InsertRow{}
		var order []string
		for _, r := range claimed {
			if _, ok := byQueue[r.Queue]; !ok {
				order = append(order, r.Queue)
			}
			body := r.Payload
			if body == nil {
				body = []byte{} // an empty BLOB scans as nil; the column is NOT NULL
			}
			byQueue[r.Queue] = append(byQueue[r.Queue], sqlqueue.InsertRow{UUID: r.UUID, Headers: []byte(r.headers), Body: body, Delay: delay})
		}
		for _, name := range order {
			q, ok := queues[name]
			if !ok {
				q = s.queueByName(name)
			}
			for _, st := range s.Dialect.Insert(q, byQueue[name]) {
				if err := s.exec(ctx, tx, st); err != nil {
					return fmt.Errorf("to %s: %w", name, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return done, fmt.Errorf("replay: %w", err)
	}
	return done, nil
}
