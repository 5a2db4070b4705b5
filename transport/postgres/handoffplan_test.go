package postgres_test

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The hand-off claim (ClaimKeys) finds each key's head by a seek of the
// key index, then locks the heads it takes by their ids. That second read
// goes through the primary key whatever the table's statistics. With a
// plain "state = 0" the generic plan made without statistics (a new
// table, or one analyzed while empty: the state that the first claims of
// a queue run in, before the source's ANALYZE) read the pending index
// instead, every due pending row, filtered by id. A connection that cached
// that plan read the whole backlog for each hand-off: in a drain of
// 20,000 rows with 1,000 keys, 17 hand-offs took 26 ms each instead of
// 1–5 (docs/benchmarks.md). It fails on that statement in the first three
// cases.
func TestHandOffLocksHeadsByPrimaryKey(t *testing.T) {
	for _, c := range []struct {
		name          string
		rows          int
		before, after bool // ANALYZE before the rows go in, after
	}{
		{"one row, no statistics", 1, false, false},
		{"backlog, no statistics", 5000, false, false},
		{"backlog, analyzed while empty", 5000, true, false},
		{"backlog, analyzed", 5000, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := openDB(t, 2)
			q := newSource(t, db, "handoffplan").Queue()
			var stmts []string
			if c.before {
				stmts = append(stmts, `ANALYZE `+q.Table)
			}
			stmts = append(stmts, `INSERT INTO `+q.Table+` (uuid, headers, body, ordering_key, waiting)
				SELECT md5(g::text), '{}', '\x78', 'k' || (g % 100), g > 100 FROM generate_series(1, `+strconv.Itoa(c.rows)+`) AS g`)
			if c.after {
				stmts = append(stmts, `ANALYZE `+q.Table)
			}
			execAll(t, db, stmts...)
			keys := make([]string, 10)
			for i := range keys {
				keys[i] = fmt.Sprint("k", i)
			}
			st := postgres.Dialect{}.ClaimKeys(q, 1, keys, make([]int64, len(keys)), 64, 0, time.Minute, time.Minute, []sqlqueue.Ref{{ID: 1, Owner: 7}})
			plan := genericPlan(t, db, st)
			// The lock's read: the scan of the table under the alias p.
			m := regexp.MustCompile(`(?m)^.*Scan.* on ` + regexp.QuoteMeta(q.Name) + ` p\b.*$(\n.*(Cond|Filter|Index Scan on).*$)*`).FindString(plan)
			if m == "" {
				t.Fatalf("no scan of the heads (p) in the plan:\n%s", plan)
			}
			if !regexp.MustCompile(`_pkey\b`).MatchString(m) || regexp.MustCompile(`_(pending|ready|expiry|leased|key)\b`).MatchString(m) {
				t.Errorf("the heads are not read by the primary key:\n%s\nplan:\n%s", m, plan)
			}
		})
	}
}
