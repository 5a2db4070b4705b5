package postgres_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"testing"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// promoted runs PromoteHeads in a transaction and returns the ids it
// promoted, sorted; keep commits the transaction.
func promoted(t *testing.T, db *sql.DB, q sqlqueue.Queue, limit int, keep bool) []int64 {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	st := postgres.Dialect{}.PromoteHeads(q, limit)
	ids := scanIDs(t, tx, st.SQL, st.Args...)
	if keep {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// scanIDs returns the ids query answers (one column), sorted.
func scanIDs(t *testing.T, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string, args ...any) []int64 {
	t.Helper()
	rows, err := q.QueryContext(context.Background(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// TestPromoteHeadsFindsEveryWaitingHead checks PromoteHeads on 1,500 keys
// (past the keys it finds one seek each, promoteWalk, so both of its ways
// of finding heads run): it promotes exactly the heads that are waiting
// and pending, never a row behind its key's head, an unkeyed row or a
// head in flight, and at most its limit.
func TestPromoteHeadsFindsEveryWaitingHead(t *testing.T) {
	db := openDB(t, 2)
	q := newSource(t, db, "promoteheads").Queue()
	// Key k (k = 0…1499) has two rows, its head first; the head is
	// waiting and pending when k % 3 = 0, ready when k % 3 = 1, waiting
	// but fetched when k % 3 = 2. Every second row waits. Unkeyed rows
	// in between are waiting too (no insert marks them so; the sweep must
	// not touch them anyway).
	execAll(t, db,
		`INSERT INTO `+q.Table+` (uuid, headers, body, ordering_key, waiting, state)
		 SELECT md5(r::text || '-' || k::text), '{}', '\x00'::bytea, 'key-' || lpad(k::text, 4, '0'),
		        r = 2 OR k % 3 <> 1, CASE WHEN r = 1 AND k % 3 = 2 THEN 1 ELSE 0 END
		 FROM generate_series(1, 2) AS r, generate_series(0, 1499) AS k ORDER BY r, k`,
		`INSERT INTO `+q.Table+` (uuid, headers, body, waiting) SELECT md5('u' || g::text), '{}', '\x00'::bytea, true FROM generate_series(1, 100) AS g`,
		`ANALYZE `+q.Table,
	)
	want := scanIDs(t, db, `SELECT id FROM `+q.Table+`
		WHERE ordering_key IS NOT NULL AND waiting AND state = 0
		  AND NOT EXISTS (SELECT 1 FROM `+q.Table+` AS e WHERE e.ordering_key = `+q.Table+`.ordering_key AND e.id < `+q.Table+`.id)`)
	if len(want) != 500 {
		t.Fatalf("the fixture has %d waiting heads, want 500", len(want))
	}
	if got := promoted(t, db, q, 120, false); len(got) != 120 {
		t.Fatalf("limit 120 promoted %d rows", len(got))
	}
	if got := promoted(t, db, q, 10000, true); !slices.Equal(got, want) {
		t.Fatalf("promoted %d rows, want the 500 waiting heads (first wrong: %v)", len(got), firstDiff(got, want))
	}
	if got := promoted(t, db, q, 10000, true); len(got) != 0 {
		t.Fatalf("a second sweep promoted %d rows, want none", len(got))
	}
}

// firstDiff returns the first id where got and want differ, for messages.
func firstDiff(got, want []int64) []int64 {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return []int64{got[i], want[i]}
		}
	}
	return nil
}

// TestPromoteHeadsSkipsBacklog checks that a sweep over a few hot keys with
// a deep backlog reads the keys' heads, not the backlog: 10 keys × 20,000
// rows. Reading the key index whole took 15,000+ buffers for it.
func TestPromoteHeadsSkipsBacklog(t *testing.T) {
	db := openDB(t, 2)
	q := newSource(t, db, "promotebacklog").Queue()
	execAll(t, db,
		`INSERT INTO `+q.Table+` (uuid, headers, body, ordering_key, waiting)
		 SELECT md5(g::text), '{}', '\x00'::bytea, 'key-' || (g % 10), g > 10 FROM generate_series(1, 200000) AS g`,
		`ANALYZE `+q.Table,
	)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	st := postgres.Dialect{}.PromoteHeads(q, 1000)
	var doc string
	if err := tx.QueryRowContext(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+st.SQL, st.Args...).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal([]byte(doc), &plan); err != nil || len(plan) != 1 {
		t.Fatalf("explain: %v: %s", err, doc)
	}
	if blocks := plan[0].Plan.Hit + plan[0].Plan.Read; blocks > 1000 {
		t.Errorf("PromoteHeads read %d buffers over 10 keys x 20,000 rows, want at most 1,000:\n%s", blocks, doc)
	}
}
