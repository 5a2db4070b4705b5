package sqlbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// benchScale is the scale of the Go benchmarks: BERTH_BENCH_SCALE, or 0.05
// (a 1,000-message drain, a 3 s steady run).
func benchScale(tb testing.TB) float64 {
	if v := os.Getenv("BERTH_BENCH_SCALE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			tb.Fatalf("BERTH_BENCH_SCALE=%q: want a positive number", v)
		}
		return f
	}
	return 0.05
}

// runBench runs each config whose strategy runs on db as a sub-benchmark
// and reports its metrics.
func runBench(b *testing.B, db database, rcs []RunConfig) {
	ctx := context.Background()
	h := newHarness(db)
	defer h.Close()
	for _, rc := range only(rcs, db.strategies()) {
		b.Run(fmt.Sprintf("%s/instances=%d", rc.Strategy, rc.Instances), func(b *testing.B) {
			var last bench.Result
			for b.Loop() {
				r, err := h.Run(ctx, rc)
				if err != nil {
					b.Fatal(err)
				}
				last = r
			}
			for _, k := range []string{"msg_per_s", "round_trips_per_msg", "statements_per_msg", "pgss_calls_per_msg",
				"empty_claims_per_msg", "db_cpu_ms_per_msg", "db_cpu_mid_ms_per_msg", "client_cpu_mid_ms_per_msg", "db_session_cpu_ms_per_msg",
				"db_tx_per_msg", "db_write_tx_per_msg", "p50_ms", "p99_ms", "backlog_left"} {
				if v, ok := last.Metrics[k]; ok {
					b.ReportMetric(v, k)
				}
			}
			if last.Notes != "" {
				b.Log(last.Notes)
			}
		})
	}
}

// openTestPostgres opens the PostgreSQL at BERTH_TEST_POSTGRES_URL (skipping, or
// failing under CI, without it).
func openTestPostgres(tb testing.TB) *postgresDB {
	db, err := openPostgres(context.Background(), testenv.PostgresURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	return db
}

// openTestSQLServer opens the SQL Server at BERTH_TEST_SQLSERVER_URL
// (skipping without it, even under CI).
func openTestSQLServer(tb testing.TB) *sqlServerDB {
	db, err := openSQLServer(context.Background(), testenv.SQLServerURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	return db
}

// BenchmarkDrain drains a backlog with 1, 4 and 12 instances of each
// strategy on PostgreSQL (sql/drain at BERTH_BENCH_SCALE, default 0.05):
//
//	go test -run '^$' -bench Drain -benchtime 1x ./internal/bench/sqlbench/
func BenchmarkDrain(b *testing.B) {
	runBench(b, openTestPostgres(b), DrainConfigs(benchScale(b)))
}

// BenchmarkSteady runs each strategy under a steady load on PostgreSQL
// (sql/steady at BERTH_BENCH_SCALE, default 0.05):
//
//	go test -run '^$' -bench Steady -benchtime 1x ./internal/bench/sqlbench/
func BenchmarkSteady(b *testing.B) {
	runBench(b, openTestPostgres(b), SteadyConfigs(benchScale(b)))
}

// BenchmarkSQLServerDrain is BenchmarkDrain on the SQL Server at
// BERTH_TEST_SQLSERVER_URL, Berth alone:
//
//	go test -run '^$' -bench SQLServerDrain -benchtime 1x ./internal/bench/sqlbench/
func BenchmarkSQLServerDrain(b *testing.B) {
	runBench(b, openTestSQLServer(b), DrainConfigs(benchScale(b)))
}

// BenchmarkSQLServerSteady is BenchmarkSteady on the SQL Server at
// BERTH_TEST_SQLSERVER_URL, Berth alone.
func BenchmarkSQLServerSteady(b *testing.B) {
	runBench(b, openTestSQLServer(b), SteadyConfigs(benchScale(b)))
}

// BenchmarkTxCost is the exactly-once comparison on PostgreSQL
// (TxStrategies): a drain with 1 and 4 instances, then a light steady load
// (4 instances, 200 msg/s, 10 ms handler), every handler writing one row:
//
//	go test -run '^$' -bench TxCost -benchtime 1x ./internal/bench/sqlbench/
func BenchmarkTxCost(b *testing.B) {
	var rcs []RunConfig
	for _, rc := range DrainConfigs(benchScale(b)) {
		if rc.Instances <= 4 && rc.Strategy == StrategyBerth {
			for _, s := range TxStrategies {
				rc.Strategy = s
				rcs = append(rcs, rc)
			}
		}
	}
	for _, s := range TxStrategies {
		rc := SteadyConfigs(benchScale(b))[0]
		rc.Strategy, rc.Instances, rc.Rate, rc.Handler = s, 4, 200, 10*time.Millisecond
		rcs = append(rcs, rc)
	}
	runBench(b, openTestPostgres(b), rcs)
}

// TestRunSmoke runs one tiny drain and one tiny steady run of every
// strategy on a real PostgreSQL and checks that the measurements are there.
func TestRunSmoke(t *testing.T) {
	ctx := context.Background()
	h := newHarness(openTestPostgres(t))
	defer h.Close()
	for _, s := range append(append([]string(nil), Strategies...), StrategyBerthEffect, StrategyBerthTx, StrategyWatermillSQLTx) {
		t.Run(s, func(t *testing.T) {
			rc := DrainConfigs(0.01)[0]
			rc.Strategy, rc.Instances, rc.Backlog = s, 2, 50
			r, err := h.Run(ctx, rc)
			if err != nil {
				t.Fatal(err)
			}
			if r.Messages != 50 || r.Metrics["duplicates"] != 0 || strings.Contains(r.Notes, "effects failed") {
				t.Fatalf("drain processed %d (duplicates %v), want 50: %s", r.Messages, r.Metrics["duplicates"], r.Notes)
			}
			if r.Metrics["round_trips_per_msg"] <= 0 || r.Metrics["statements_per_msg"] <= 0 {
				t.Fatalf("no round trips counted: %v", r.Metrics)
			}
			if r.Database != "" {
				t.Fatalf("Database = %q on PostgreSQL, want \"\"", r.Database)
			}
			t.Logf("drain: %v %s", r.Metrics, r.Notes)
		})
	}
}

// TestRunSmokeSQLServer runs one tiny drain and one short steady run of
// Berth on the SQL Server at BERTH_TEST_SQLSERVER_URL and checks the
// measurements: round trips at the driver always, the server's CPU and
// transactions when the login has VIEW SERVER STATE (otherwise the notes
// say so). Run fails when a run's schema is still there after its drop.
func TestRunSmokeSQLServer(t *testing.T) {
	ctx := context.Background()
	db := openTestSQLServer(t)
	h := newHarness(db)
	defer h.Close()
	drain := DrainConfigs(0.01)[0]
	drain.Instances, drain.Backlog = 2, 200
	steady := SteadyConfigs(0.01)[0]
	steady.Instances, steady.Rate, steady.Duration, steady.Grace = 2, 50, 2*time.Second, 5*time.Second
	for _, rc := range []RunConfig{drain, steady} {
		t.Run(rc.Scenario, func(t *testing.T) {
			r, err := h.Run(ctx, rc)
			if err != nil {
				t.Fatal(err)
			}
			if r.Database != "sqlserver" || r.Strategy != StrategyBerth {
				t.Fatalf("result on %q by %q, want sqlserver, berth", r.Database, r.Strategy)
			}
			if r.Messages != int(r.Metrics["published"]) || r.Messages == 0 || r.Metrics["duplicates"] != 0 {
				t.Fatalf("processed %d of %v (duplicates %v): %s", r.Messages, r.Metrics["published"], r.Metrics["duplicates"], r.Notes)
			}
			for _, k := range []string{"round_trips_per_msg", "statements_per_msg", "connections"} {
				if r.Metrics[k] <= 0 {
					t.Errorf("%s = %v, want > 0", k, r.Metrics[k])
				}
			}
			if db.dmv {
				for _, k := range []string{"db_cpu_ms_per_msg", "db_session_cpu_ms_per_msg"} {
					if _, ok := r.Metrics[k]; !ok {
						t.Errorf("no %s with VIEW SERVER STATE", k)
					}
				}
			} else if !strings.Contains(r.Notes, NoServerState) {
				t.Errorf("no DMV access and the notes do not say so: %s", r.Notes)
			}
			t.Logf("%v %s", r.Metrics, r.Notes)
		})
	}
}

func TestReadProcStat(t *testing.T) {
	line := []byte("4242 (postgres: a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 25 7 3 2 20 0 1 0 100 0 0")
	got, err := readProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	want := procTimes{ppid: 17, self: 32, reaped: 5}
	if got != want {
		t.Fatalf("readProcStat = %+v, want %+v", got, want)
	}
	if _, err := readProcStat([]byte("garbage")); err == nil {
		t.Fatal("readProcStat(garbage): want an error")
	}
}

// TestCountingConn checks the round-trip rule: a write after a read opens a
// round trip; writes in a row without a reply are one.
func TestCountingConn(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	ctr := NewCounter(nil)
	conn, err := ctr.dial(func(context.Context, string, string) (net.Conn, error) { return client, nil })(context.Background(), "tcp", "x")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	done := make(chan struct{})
	go func() { // the server: read 3 messages, reply once, read 1, reply once
		defer close(done)
		buf := make([]byte, 8)
		for _, reply := range []bool{false, false, true, true} {
			if _, err := server.Read(buf); err != nil {
				return
			}
			if reply {
				if _, err := server.Write([]byte("r")); err != nil {
					return
				}
			}
		}
	}()
	buf := make([]byte, 8)
	for _, s := range []string{"a", "b", "c"} { // pipelined: one round trip
		if _, err := conn.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Read(buf); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("d")); err != nil { // after a reply: a second one
		t.Fatal(err)
	}
	if _, err := conn.Read(buf); err != nil {
		t.Fatal(err)
	}
	<-done
	if got := ctr.Snapshot(); got.RoundTrips != 2 || got.Conns != 1 {
		t.Fatalf("snapshot = %+v, want 2 round trips on 1 connection", got)
	}
}

// A tracker's marks close when that many distinct messages are processed,
// and duplicates do not move them.
func TestTrackerMarks(t *testing.T) {
	tr := newTracker()
	lo, hi := tr.mark(2), tr.mark(3)
	isClosed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	a, b, c := message.NewMessage("a", nil), message.NewMessage("b", nil), message.NewMessage("c", nil)
	now := time.Now()
	tr.record(a, now)
	tr.record(a, now) // a duplicate
	if isClosed(lo) || isClosed(hi) {
		t.Fatal("a mark closed after one distinct message")
	}
	tr.record(b, now)
	if !isClosed(lo) || isClosed(hi) {
		t.Fatal("after two distinct messages only the first mark should be closed")
	}
	tr.record(c, now)
	if !isClosed(hi) {
		t.Fatal("the second mark did not close at three messages")
	}
}
