package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// TestFleet runs the fleet cases (listeners table, pause and resume across
// two pools), each on a schema of its own.
func TestFleet(t *testing.T) { sqlqueuetest.RunFleet(t, kitHarness()) }

// BenchmarkFleetUpsert times one listener's report: the upsert a fleet
// reporter sends per listener per interval, on a table of 100 rows (100
// listeners of one deployment).
func BenchmarkFleetUpsert(b *testing.B) {
	url := testenv.PostgresSchemaURL(b)
	db, err := postgres.Open(url, 2)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	d := postgres.Dialect{}
	n := sqlqueue.NamesFor(d, sqlqueue.Tables{})
	ctx := context.Background()
	if err := sqlqueue.EnsureFleet(ctx, db, d, n); err != nil {
		b.Fatal(err)
	}
	rows := make([]sqlqueue.ListenerRow, 100)
	for i := range rows {
		rows[i] = sqlqueue.ListenerRow{Instance: "host/1/ab", Name: fmt.Sprintf("topic_%03d", i), Queue: fmt.Sprintf("berth_q_topic_%03d", i),
			Host: "host", PID: 1, Status: "accepting", Loop: "running", Wave: 8, StartedAt: time.Now(), Interval: 5 * time.Second}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r := rows[i%len(rows)]
		r.Buffered, r.LastReceive = i%16, time.Now()
		st := d.UpsertListener(n, r)
		if _, err := db.ExecContext(ctx, st.SQL, st.Args...); err != nil {
			b.Fatal(err)
		}
	}
}
