package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// openFile opens a database file of its own, closed at cleanup.
func openFile(t *testing.T) *sql.DB {
	t.Helper()
	db, closer, err := sqlite.Open(filepath.Join(t.TempDir(), "stray.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	return db
}

// Both stray statements read the lease index, without statistics (Berth
// never runs ANALYZE on SQLite), never scanning the table.
func TestStrayPlanUsesLeaseIndex(t *testing.T) {
	db := openFile(t)
	d := sqlite.Dialect{}
	ctx := context.Background()
	src, err := sqlqueue.NewSource(ctx, d, sqlqueue.SubscriberConfig{DB: db, SweepInterval: -1}, "stray_plan", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	q := src.Queue()
	n := sqlqueue.NamesFor(d, sqlqueue.Tables{})
	// The stray rows' move, and DeadLetterExpired's select (the first
	// statement: "state <> 0" repeats the index's filter, which SQLite
	// does not infer from "state = 2").
	sts := append(d.DeadLetterStray(n, q, 1000), d.DeadLetterExpired(n, q, 3, "r", 1000)[0])
	for i, st := range sts {
		rows, err := db.Query(`EXPLAIN QUERY PLAN `+st.SQL, st.Args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		p := strings.Join(plan, "\n")
		if !strings.Contains(p, "USING INDEX "+q.Name+"_leased") || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("statement %d does not read the lease index in its order:\n%s", i, p)
		}
		for _, line := range plan {
			if line == "SCAN "+q.Name {
				t.Errorf("statement %d scans the table:\n%s", i, p)
			}
		}
	}
}
