package sqlite_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// TestClaimLimitNotReprepared checks that a prepared claim runs with a new
// row limit without being compiled again. SQLite reads a bare LIMIT
// parameter's bound value into the plan and expires the statement when the
// parameter is bound to another value; the claims' limit (the listener's
// free permits) changes from one claim to the next, so each claim was
// parsed and planned again. The authorizer runs whenever a statement is
// compiled: it must not run for the second and third executions.
func TestClaimLimitNotReprepared(t *testing.T) {
	ctx := context.Background()
	d := sqlite.Dialect{}
	conn, q := queueConn(t)
	var compiles atomic.Int64
	if err := conn.Raw(func(dc any) error {
		return dc.(msqlite.AuthorizerRegisterer).RegisterAuthorizer(func(msqlite.AuthorizerActionCode, string, string, string, string) msqlite.AuthorizerReturnCode {
			compiles.Add(1)
			return msqlite.AuthorizerOK
		})
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Raw(func(dc any) error { return dc.(msqlite.AuthorizerRegisterer).RegisterAuthorizer(nil) })

	const fetch, lease = 2 * time.Second, 30 * time.Second
	for _, c := range []struct {
		name string
		st   func(n, direct int) sqlqueue.Stmt
	}{
		{"Claim", func(n, _ int) sqlqueue.Stmt { return d.Claim(q, 7, n, fetch) }},
		{"ClaimDirect", func(n, direct int) sqlqueue.Stmt { return d.ClaimDirect(q, 7, n, direct, fetch, lease) }},
		{"ClaimKeys", func(n, direct int) sqlqueue.Stmt {
			return d.ClaimKeys(q, 7, []string{"a", "b"}, nil, n, direct, fetch, lease, nil)
		}},
	} {
		first := c.st(5, 2)
		ps, err := conn.PrepareContext(ctx, first.SQL)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for i, size := range [][2]int{{5, 2}, {9, 4}, {3, 1}} {
			st := c.st(size[0], size[1])
			if st.SQL != first.SQL {
				t.Fatalf("%s: the text changed with the limit", c.name)
			}
			before := compiles.Load()
			rows, err := ps.QueryContext(ctx, st.Args...)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			for rows.Next() {
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
			if n := compiles.Load() - before; i > 0 && n > 0 {
				t.Errorf("%s with limit %d, direct %d: compiled again (%d authorizer calls) after running with limit 5, direct 2", c.name, size[0], size[1], n)
			}
		}
		_ = ps.Close()
	}
}
