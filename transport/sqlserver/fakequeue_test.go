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
// to its rows what the statement would, for rows that are due at once (no
// delays or time-to-live), keyed or not, answering the rows the statement
// returns: a claim takes a keyed row only when it heads its key (no row of
// the key with a lower id) and no row of the key is fetched or processing,
// as Claim's probes do, and the key claim (ClaimKeys) looks at the heads
// of its keys only. It also answers the session check, the schema
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
	key             string // the ordering key, "" for none
}

// Statement kinds, as kind names them.
const (
	kindClaim         = "claim"
	kindClaimDirect   = "claim direct"
	kindClaimComplete = "claim carrying acks"
	kindClaimKeys     = "key claim"
	kindKeysRiding    = "key claim carrying acks"
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
	case strings.Contains(text, "FROM @keys AS k\n"):
		if strings.Contains(text, "\nDELETE q\n") {
			return kindKeysRiding
		}
		return kindClaimKeys
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
		out := q.ride(c.Args[5].(string))
		return append(out, q.claim(c.Args[1].(int64), int(c.Args[0].(int64)), int(c.Args[3].(int64)), true)...)
	case kindClaimKeys, kindKeysRiding:
		var out [][]any
		if kind(c.Stmt) == kindKeysRiding {
			out = q.ride(c.Args[6].(string))
		}
		var keys []string
		if err := json.Unmarshal([]byte(c.Args[5].(string)), &keys); err != nil {
			panic(err)
		}
		return append(out, q.claimKeys(c.Args[1].(int64), keys, int(c.Args[0].(int64)), int(c.Args[3].(int64)))...)
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
		heads, inflight := q.keys()
		ready := slices.ContainsFunc(q.rows, func(r *fakeRow) bool { return claimable(r, heads, inflight) })
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
		K string `json:"k"`
	}
	if err := json.Unmarshal([]byte(doc), &rows); err != nil {
		panic(err)
	}
	for _, r := range rows {
		q.nextID++
		q.rows = append(q.rows, &fakeRow{id: q.nextID, uuid: r.U, headers: []byte(r.H), body: r.B, key: r.K})
	}
}

// claim takes at most n claimable rows, oldest first, for owner: the
// first direct of them started (processing, attempt counted), the others
// fetched. withState adds the state column (ClaimDirect's).
func (q *fakeQueue) claim(owner int64, n, direct int, withState bool) [][]any {
	heads, inflight := q.keys()
	var out [][]any
	for _, r := range q.rows {
		if len(out) == n {
			break
		}
		if claimable(r, heads, inflight) {
			out = append(out, q.take(r, owner, len(out) < direct, withState))
		}
	}
	return out
}

// claimKeys is ClaimKeys: claim over the heads of keys only.
func (q *fakeQueue) claimKeys(owner int64, keys []string, n, direct int) [][]any {
	heads, inflight := q.keys()
	var out [][]any
	for _, r := range q.rows { // in id order: oldest due first
		if len(out) == n {
			break
		}
		if r.key != "" && slices.Contains(keys, r.key) && claimable(r, heads, inflight) {
			out = append(out, q.take(r, owner, len(out) < direct, true))
		}
	}
	return out
}

// take sets r fetched for owner, or started, and returns its row.
func (q *fakeQueue) take(r *fakeRow, owner int64, start, withState bool) []any {
	r.state, r.owner = 1, owner
	if start {
		r.state, r.attempts = 2, r.attempts+1
	}
	row := []any{r.id, r.uuid, r.headers, r.body, r.attempts}
	if withState {
		row = append(row, r.state)
	}
	return row
}

// keys returns each ordering key's head (its lowest id) and the keys with
// a row fetched or processing.
func (q *fakeQueue) keys() (heads map[string]int64, inflight map[string]bool) {
	heads, inflight = map[string]int64{}, map[string]bool{}
	for _, r := range q.rows {
		if r.key == "" {
			continue
		}
		if _, ok := heads[r.key]; !ok {
			heads[r.key] = r.id
		}
		if r.state > 0 {
			inflight[r.key] = true
		}
	}
	return heads, inflight
}

// claimable reports whether a claim may take r: pending and, keyed, its
// key's head with no row of its key in flight.
func claimable(r *fakeRow, heads map[string]int64, inflight map[string]bool) bool {
	return r.state == 0 && (r.key == "" || heads[r.key] == r.id && !inflight[r.key])
}

// ride deletes the riding acks (the refs in doc) as ClaimComplete's
// DELETE does and returns their rows, state sqlqueue.StateAcked.
func (q *fakeQueue) ride(doc string) [][]any {
	var out [][]any
	for _, r := range q.fenced(doc, 2) {
		q.delete(r)
		out = append(out, []any{r.id, "", []byte{}, []byte{}, int32(0), int32(-1)})
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
