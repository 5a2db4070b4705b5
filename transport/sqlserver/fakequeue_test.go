package sqlserver

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
)

// fakeQueue plays one queue table behind the fake TDS server
// (fakeTDS.AnswerCall), so that the engine's own loops run on it end to
// end: it recognises each statement of the dialect by its text and does
// to its rows what the statement would, for unkeyed rows that are due at
// once (no delays, time-to-live or ordering keys), answering the rows
// the statement returns. It also answers the session check, the schema
// version, the locks, the subscriptions (one queue, name) and the idle
// probe. What it cannot check — plans, locks, concurrency — is the real
// server's; what it can is how many statements the engine sends for a
// flow of messages, and of which kind.
type fakeQueue struct {
	name string // the unquoted queue table name

	mu     sync.Mutex
	rows   []*fakeRow // by id
	nextID int64
}

type fakeRow struct {
	id              int64
	uuid            string
	headers, body   []byte
	state, attempts int32
	owner           int64
}

// Statement kinds, as kind names them.
const (
	kindClaim         = "claim"
	kindClaimDirect   = "claim direct"
	kindClaimComplete = "claim carrying acks"
	kindBegin         = "begin"
	kindComplete      = "complete"
	kindRenew         = "renew"
	kindRetry         = "retry"
	kindRelease       = "release"
	kindReleaseDirect = "release direct"
	kindInsert        = "insert"
	kindProbe         = "probe"
)

// kind names the dialect's statement in text ("" for any other): the
// claims by their pick, the settlements by their SET or DELETE.
func kind(text string) string {
	switch {
	case strings.Contains(text, "INSERT INTO @c (id, started)"):
		if strings.Contains(text, "\nDELETE q\n") {
			return kindClaimComplete
		}
		return kindClaimDirect
	case strings.Contains(text, "INSERT INTO @c (id)\n"):
		return kindClaim
	case strings.Contains(text, "UPDATE q SET state = 2, attempts = q.attempts + 1"):
		return kindBegin
	case strings.Contains(text, "DELETE q\nOUTPUT deleted.id INTO @t"):
		return kindComplete
	case strings.Contains(text, "UPDATE q SET lease_until"):
		return kindRenew
	case strings.Contains(text, "delay_ms bigint '$.delay_ms'"):
		return kindRetry
	case strings.Contains(text, "attempts = CASE WHEN q.attempts > 0 THEN q.attempts - 1"):
		return kindReleaseDirect
	case strings.Contains(text, "UPDATE q SET state = 0, owner = NULL, lease_until = NULL\nOUTPUT"):
		return kindRelease
	case strings.Contains(text, "FROM OPENJSON(@p1) WITH (n int"):
		return kindInsert
	case strings.Contains(text, " AS next_ms"):
		return kindProbe
	}
	return ""
}

// answer is the fake's AnswerCall function.
func (q *fakeQueue) answer(c rpcCall) [][]any {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch kind(c.Stmt) {
	case kindInsert:
		q.insert(c.Args[0].(string))
	case kindClaim:
		return q.claim(c.Args[1].(int64), int(c.Args[0].(int64)), 0, false)
	case kindClaimDirect:
		return q.claim(c.Args[1].(int64), int(c.Args[0].(int64)), int(c.Args[3].(int64)), true)
	case kindClaimComplete:
		var out [][]any
		for _, r := range q.fenced(c.Args[5].(string), 2) {
			q.delete(r)
			out = append(out, []any{r.id, "", []byte{}, []byte{}, int32(0), int32(-1)})
		}
		return append(out, q.claim(c.Args[1].(int64), int(c.Args[0].(int64)), int(c.Args[3].(int64)), true)...)
	case kindBegin:
		var out [][]any
		for _, r := range q.fenced(c.Args[0].(string), 1) {
			r.state, r.attempts = 2, r.attempts+1
			out = append(out, []any{r.id, r.attempts})
		}
		return out
	case kindComplete, kindRenew, kindRetry, kindRelease, kindReleaseDirect:
		want := int32(2)
		if kind(c.Stmt) == kindRelease {
			want = 1
		}
		var out [][]any
		for _, r := range q.fenced(c.Args[0].(string), want) {
			switch kind(c.Stmt) {
			case kindComplete:
				q.delete(r)
			case kindRetry, kindRelease:
				r.state, r.owner = 0, 0
			case kindReleaseDirect:
				r.state, r.owner, r.attempts = 0, 0, max(r.attempts-1, 0)
			}
			out = append(out, []any{r.id})
		}
		return out
	case kindProbe:
		ready := slices.ContainsFunc(q.rows, func(r *fakeRow) bool { return r.state == 0 })
		return [][]any{{q.name, ready, int64(0), len(q.rows) == 0}}
	}
	switch {
	case strings.Contains(c.Stmt, "SELECT queue_table FROM"):
		return [][]any{{q.name}}
	case strings.Contains(c.Stmt, "SELECT @copy;"):
		return [][]any{{int32(0)}}
	}
	return answerEngine(c.Stmt)
}

// insert adds Insert's rows (@p1: the JSON document), pending.
func (q *fakeQueue) insert(doc string) {
	var rows []struct {
		U string `json:"u"`
		H string `json:"h"`
		B []byte `json:"b"` // base64, as encoding/json reads it
	}
	if err := json.Unmarshal([]byte(doc), &rows); err != nil {
		panic(err)
	}
	for _, r := range rows {
		q.nextID++
		q.rows = append(q.rows, &fakeRow{id: q.nextID, uuid: r.U, headers: []byte(r.H), body: r.B})
	}
}

// claim takes at most n pending rows, oldest first, for owner: the first
// direct of them started (processing, attempt counted), the others fetched.
// withState adds the state column (ClaimDirect's).
func (q *fakeQueue) claim(owner int64, n, direct int, withState bool) [][]any {
	var out [][]any
	for _, r := range q.rows {
		if len(out) == n {
			break
		}
		if r.state != 0 {
			continue
		}
		r.state, r.owner = 1, owner
		if len(out) < direct {
			r.state, r.attempts = 2, r.attempts+1
		}
		row := []any{r.id, r.uuid, r.headers, r.body, r.attempts}
		if withState {
			row = append(row, r.state)
		}
		out = append(out, row)
	}
	return out
}

// fenced returns the rows of refs (the JSON array refsJSON writes) whose
// owner matches and whose state is state.
func (q *fakeQueue) fenced(refs string, state int32) []*fakeRow {
	var rs []struct {
		ID    int64 `json:"id"`
		Owner int64 `json:"owner"`
	}
	if err := json.Unmarshal([]byte(refs), &rs); err != nil {
		panic(err)
	}
	var out []*fakeRow
	for _, ref := range rs {
		for _, r := range q.rows {
			if r.id == ref.ID && r.owner == ref.Owner && r.state == state {
				out = append(out, r)
			}
		}
	}
	return out
}

func (q *fakeQueue) delete(r *fakeRow) {
	q.rows = slices.DeleteFunc(q.rows, func(x *fakeRow) bool { return x == r })
}

// Len returns the number of rows left.
func (q *fakeQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.rows)
}
