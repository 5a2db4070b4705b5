package postgres_test

import (
	"strings"
	"testing"

	"github.com/berth-go/berth/transport/postgres"
)

// The stray statement reads the lease index, not the table: under the
// generic plan of the prepared statement as under a custom one.
func TestStrayPlanUsesLeaseIndex(t *testing.T) {
	ctx, conn, q, n := planQueue(t, "stray_plan")
	d := postgres.Dialect{}
	sts := d.DeadLetterStray(n, q, 1000)
	if len(sts) != 1 {
		t.Fatalf("%d statements, want 1", len(sts))
	}
	if _, err := conn.ExecContext(ctx, `PREPARE stray(int, text) AS `+sts[0].SQL); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		if _, err := conn.ExecContext(ctx, `SET plan_cache_mode = `+mode); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.QueryContext(ctx, `EXPLAIN EXECUTE stray(1000, 'x')`)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		p := strings.Join(plan, "\n")
		if strings.Contains(p, "Seq Scan") || !strings.Contains(p, q.Name+"_leased") {
			t.Errorf("%s: the stray statement does not read the lease index:\n%s", mode, p)
		}
	}
}
