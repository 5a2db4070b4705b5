package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/bench"
)

func init() {
	bench.Register(bench.Scenario{
		Name:        "test/fake",
		Description: "a registered scenario for the command's tests",
		Run: func(ctx context.Context, env bench.Env) ([]bench.Result, error) {
			var rs []bench.Result
			for i, n := range []int{1, 2, 4} {
				env.Progress(float64(i)/3, "instances "+string(rune('0'+n)))
				for _, s := range []string{"berth", "baseline"} {
					rs = append(rs, bench.Result{
						Strategy: s, Instances: n, Messages: 1000 * n, Duration: time.Second,
						Metrics: map[string]float64{"msg_per_s": float64(1000*n) * env.Scale, "round_trips_per_msg": 0.5},
						Series: map[string][]bench.Point{
							"heap_inuse_bytes": {{At: 0, Value: 1 << 20}, {At: time.Second, Value: 3 << 20}},
							"rss_bytes":        {{At: 0, Value: 8 << 20}, {At: time.Second, Value: 9 << 20}},
						},
					})
				}
			}
			return rs, nil
		},
	})
	bench.Register(bench.Scenario{
		Name: "test/one-of", NeedsOneOf: []string{"postgres", "sqlserver"},
		Run: func(ctx context.Context, env bench.Env) ([]bench.Result, error) {
			select {
			case oneOfEnv <- env:
			default: // a test that does not look
			}
			var rs []bench.Result
			for _, db := range []struct{ url, name string }{{env.PostgresURL, ""}, {env.SQLServerURL, "sqlserver"}} {
				if db.url == "" {
					continue
				}
				if db.name != "" {
					env.Note("only berth runs on " + db.name)
					env.Note("only berth runs on " + db.name) // printed once
				}
				rs = append(rs, bench.Result{Strategy: "berth", Database: db.name, Instances: 1, Messages: 10, Duration: time.Second,
					Metrics: map[string]float64{"msg_per_s": 10, "round_trips_per_msg": 0.1}})
			}
			return rs, nil
		},
	})
	bench.Register(bench.Scenario{
		Name: "test/needs-nothing-here", Needs: []string{"sqs"},
		Run: func(context.Context, bench.Env) ([]bench.Result, error) { panic("must be skipped") },
	})
}

// oneOfEnv receives the environment test/one-of ran with.
var oneOfEnv = make(chan bench.Env, 1)

func TestBenchWritesResultsAndCharts(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCmd(t, "bench", "--scenario", "test/fake", "--scenario", "test/needs-nothing-here", "--scale", "0.5", "--out", dir, "--sqs-endpoint", "", "--allow-skip")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(errs, "skip test/needs-nothing-here: needs sqs") || !strings.Contains(errs, "100%") {
		t.Fatalf("stderr lacks the skip message or the progress bar:\n%s", errs)
	}
	var f benchFile
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Results) != 6 || f.Results[0].Scenario != "test/fake" || f.Scale != 0.5 {
		t.Fatalf("results.json: %+v", f)
	}
	for _, name := range []string{"test-fake-throughput.svg", "test-fake-round-trips.svg", "test-fake-heap.svg", "test-fake-rss.svg"} {
		svg, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "baseline") {
			t.Fatalf("%s is not the expected chart:\n%s", name, svg)
		}
	}
	// Redraw from results.json alone.
	for _, n := range []string{"test-fake-throughput.svg"} {
		_ = os.Remove(filepath.Join(dir, n))
	}
	mustRun(t, "bench", "--charts-only", "--out", dir)
	if _, err := os.Stat(filepath.Join(dir, "test-fake-throughput.svg")); err != nil {
		t.Fatal(err)
	}
}

// A scenario that cannot run is skipped, the others' results are written,
// and the exit code is 1 unless --allow-skip says skipping is fine.
func TestBenchSkipFailsUnlessAllowed(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCmd(t, "bench", "--scenario", "test/needs-nothing-here", "--scenario", "test/fake", "--out", dir, "--sqs-endpoint", "")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errs)
	}
	lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
	if lines[0] != "skip test/needs-nothing-here: needs sqs (--sqs-endpoint or BERTH_TEST_SQS_ENDPOINT)" ||
		lines[len(lines)-1] != "berth bench: 1 scenario(s) skipped: test/needs-nothing-here (configure what they need, or pass --allow-skip)" {
		t.Fatalf("stderr:\n%s", errs)
	}
	if !strings.HasSuffix(out, "wrote results.json and 4 chart(s) to "+dir+"\n") {
		t.Fatalf("the scenario that ran was not written:\n%s", out)
	}
	code, _, errs = runCmd(t, "bench", "--scenario", "test/needs-nothing-here", "--out", dir, "--sqs-endpoint", "", "--allow-skip")
	if code != 0 || errs != "skip test/needs-nothing-here: needs sqs (--sqs-endpoint or BERTH_TEST_SQS_ENDPOINT)\n" {
		t.Fatalf("--allow-skip: exit %d\n%s", code, errs)
	}
}

// Without --out, bench writes to the current directory, not to the
// repository's docs/bench.
func TestBenchWritesToCurrentDirectory(t *testing.T) {
	docs, err := filepath.Abs(filepath.Join("..", "..", "docs", "bench"))
	if err != nil {
		t.Fatal(err)
	}
	before := dirState(t, docs)
	dir := t.TempDir()
	t.Chdir(dir)
	out := mustRun(t, "bench", "--scenario", "test/fake")
	if !strings.HasSuffix(out, "wrote results.json and 4 chart(s) to .\n") {
		t.Fatalf("stdout:\n%s", out)
	}
	for _, name := range []string{"results.json", "test-fake-throughput.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if after := dirState(t, docs); !maps.Equal(before, after) {
		t.Fatalf("docs/bench changed: %v → %v", before, after)
	}
}

// dirState maps each file of dir to its size and modification time.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range es {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = fmt.Sprint(info.Size(), info.ModTime())
	}
	return m
}

func TestBenchList(t *testing.T) {
	out := mustRun(t, "bench", "--list")
	if !strings.Contains(out, "test/fake") || !strings.Contains(out, "needs: sqs") ||
		!strings.Contains(out, "test/one-of (needs: postgres or sqlserver)") {
		t.Fatalf("--list:\n%s", out)
	}
}

// The real scenarios are registered (scenarios.go): sql/idle is listed, is
// named as a positional argument, and needs PostgreSQL alone.
func TestBenchSQLIdleRegistered(t *testing.T) {
	out := mustRun(t, "bench", "--list")
	if !strings.Contains(out, "sql/idle (needs: postgres)") {
		t.Fatalf("--list lacks sql/idle:\n%s", out)
	}
	dir := t.TempDir()
	code, out, errs := runCmd(t, "bench", "sql/idle", "--out", dir, "--postgres-url", "", "--sqlserver-url", "sqlserver://unused")
	if code != 1 || errs != "skip sql/idle: needs postgres (--postgres-url or BERTH_TEST_POSTGRES_URL)\n"+
		"berth bench: 1 scenario(s) skipped: sql/idle (configure what they need, or pass --allow-skip)\n" {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
}

// --sqlserver-url (default $BERTH_TEST_SQLSERVER_URL) reaches the scenario;
// its results on SQL Server get their own charts and lines; a scenario that
// needs one of PostgreSQL and SQL Server runs with either and is skipped
// without both.
func TestBenchSQLServerURL(t *testing.T) {
	t.Setenv("BERTH_TEST_POSTGRES_URL", "")
	t.Setenv("BERTH_TEST_SQLSERVER_URL", "")
	dir := t.TempDir()
	benchRun := func(args ...string) (string, string) {
		t.Helper()
		code, out, errs := runCmd(t, append([]string{"bench", "--scenario", "test/one-of", "--out", dir, "--allow-skip"}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
		return out, errs
	}

	_, errs := benchRun()
	if !strings.Contains(errs, "skip test/one-of: needs postgres (--postgres-url or BERTH_TEST_POSTGRES_URL) or sqlserver (--sqlserver-url or BERTH_TEST_SQLSERVER_URL)") {
		t.Fatalf("without a database, stderr lacks the skip message:\n%s", errs)
	}

	out, _ := benchRun("--sqlserver-url", "sqlserver://flag", "--postgres-url", "postgres://flag")
	if env := <-oneOfEnv; env.SQLServerURL != "sqlserver://flag" || env.PostgresURL != "postgres://flag" {
		t.Fatalf("the scenario got %q and %q", env.PostgresURL, env.SQLServerURL)
	}
	if strings.Count(out, "note: test/one-of: only berth runs on sqlserver\n") != 1 {
		t.Fatalf("stdout lacks the note, or repeats it:\n%s", out)
	}
	if !strings.Contains(out, "test/one-of on sqlserver") {
		t.Fatalf("stdout does not tell the SQL Server result apart:\n%s", out)
	}
	for _, name := range []string{"test-one-of-throughput.svg", "test-one-of-on-sqlserver-throughput.svg", "test-one-of-on-sqlserver-round-trips.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}

	// From the environment, SQL Server alone; PostgreSQL's earlier result
	// stays. --help does not show the environment's URL (its password).
	t.Setenv("BERTH_TEST_SQLSERVER_URL", "sqlserver://sa:env-secret@db")
	if _, _, errs := runCmd(t, "bench", "--help"); !strings.Contains(errs, "-sqlserver-url") || strings.Contains(errs, "env-secret") {
		t.Fatalf("--help lacks the flag or shows the environment's password:\n%s", errs)
	}
	out, _ = benchRun()
	if env := <-oneOfEnv; env.SQLServerURL != "sqlserver://sa:env-secret@db" || env.PostgresURL != "" {
		t.Fatalf("the scenario got %q and %q", env.PostgresURL, env.SQLServerURL)
	}
	if strings.Contains(out, "test/one-of  ") {
		t.Fatalf("a PostgreSQL result without PostgreSQL:\n%s", out)
	}
	f, err := readResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	var dbs []string
	for _, r := range f.Results {
		dbs = append(dbs, r.Database)
	}
	if len(dbs) != 2 || !slices.Contains(dbs, "") || !slices.Contains(dbs, "sqlserver") {
		t.Fatalf("results.json holds results on %q, want one on PostgreSQL (kept) and one on SQL Server", dbs)
	}

	// An empty --sqlserver-url overrides the environment.
	if _, errs := benchRun("--sqlserver-url", ""); !strings.Contains(errs, "skip test/one-of") {
		t.Fatalf("--sqlserver-url '' did not turn SQL Server off:\n%s", errs)
	}
}

func TestMergeResults(t *testing.T) {
	dir := t.TempDir()
	r := func(sc, db, strategy string) bench.Result {
		return bench.Result{Scenario: sc, Database: db, Strategy: strategy}
	}
	prev := []bench.Result{r("sql/drain", "", "old-pg"), r("sql/drain", "sqlserver", "old-ms"), r("sqs/backlog", "", "old-sqs"), r("gone/empty", "", "old")}
	b, err := json.Marshal(benchFile{Results: prev})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, resultsFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	got := mergeResults([]bench.Result{r("sql/drain", "", "new-pg")}, []string{"sql/drain", "gone/empty"}, dir)
	var names []string
	for _, x := range got {
		names = append(names, x.Strategy)
	}
	// sql/drain on PostgreSQL is replaced, on SQL Server kept; sqs/backlog
	// did not run; gone/empty ran and produced nothing, so its old results go.
	if want := []string{"new-pg", "old-ms", "old-sqs"}; !slices.Equal(names, want) {
		t.Fatalf("merged %v, want %v", names, want)
	}
}
