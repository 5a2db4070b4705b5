package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/internal/bench/chart"
)

// Metric keys the charts read from bench.Result.Metrics and Series.
const (
	metricThroughput = "msg_per_s"
	metricRoundTrips = "round_trips_per_msg"
	seriesHeap       = "heap_inuse_bytes" // as internal/bench/membench records it
	seriesRSS        = "rss_bytes"
)

// resultsFile is what bench writes into --out.
const resultsFile = "results.json"

type benchFile struct {
	GeneratedAt time.Time      `json:"generated_at"`
	Scale       float64        `json:"scale"`
	Results     []bench.Result `json:"results"`
}

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("berth bench", "berth bench [--scenario NAME]… [--scale F] [--out DIR] [--allow-skip] [--list]", `
Runs Berth's benchmark scenarios with a progress bar on stderr, then writes
their results to DIR/results.json (merged with the results already there for
scenarios not run this time) and SVG charts to DIR: throughput and round
trips per message by strategy and instance count, and heap over time. DIR
is the current directory unless --out names another; docs/benchmarks.md
embeds the charts that --out docs/bench writes.

A scenario needing a service that is not configured is skipped with a
message, and a run that skipped any exits 1 (after writing the results of
the others) unless --allow-skip is given. The sql/ scenarios run on
PostgreSQL (--postgres-url) and, when --sqlserver-url is set, on SQL Server
too (Berth alone there; their results and charts carry "sqlserver").
--charts-only redraws the charts from DIR/results.json.`, stderr)
	var names multi
	fs.Var(&names, "scenario", "run only this scenario (repeatable; default: all); see --list")
	scale := fs.Float64("scale", 1, "multiply sizes and durations (1 = the documented full size)")
	out := fs.String("out", ".", "directory for results.json and the SVG charts")
	allowSkip := fs.Bool("allow-skip", false, "exit 0 even when a scenario is skipped for a service that is not configured")
	pg := fs.String("postgres-url", os.Getenv("BERTH_TEST_POSTGRES_URL"), "PostgreSQL URL for the sql scenarios; default $BERTH_TEST_POSTGRES_URL")
	sqsEP := fs.String("sqs-endpoint", os.Getenv("BERTH_TEST_SQS_ENDPOINT"), "SQS endpoint for the sqs scenarios; default $BERTH_TEST_SQS_ENDPOINT")
	// Not the environment's value as the flag's default: --help would print
	// it, password included.
	sqlServer := fs.String("sqlserver-url", "", "SQL Server URL (sqlserver://…) that adds SQL Server runs of the sql scenarios; default $BERTH_TEST_SQLSERVER_URL")
	list := fs.Bool("list", false, "list the scenarios and exit")
	chartsOnly := fs.Bool("charts-only", false, "redraw the charts from DIR/results.json without running anything")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	names = append(names, pos...)
	if !isSet(fs, "sqlserver-url") {
		*sqlServer = os.Getenv("BERTH_TEST_SQLSERVER_URL")
	}
	if *scale <= 0 || math.IsNaN(*scale) || math.IsInf(*scale, 0) {
		return usagef("--scale must be > 0")
	}
	all := bench.Scenarios()
	if *list {
		if len(all) == 0 {
			fmt.Fprintln(stdout, "no scenarios are registered in this build")
		}
		for _, s := range all {
			fmt.Fprintf(stdout, "%s (needs: %s)\n    %s\n", s.Name, needsText(s), s.Description)
		}
		return nil
	}
	if *chartsOnly {
		f, err := readResults(*out)
		if err != nil {
			return err
		}
		files, err := writeCharts(*out, f.Results)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %d chart(s) to %s\n", len(files), *out)
		return nil
	}
	var run []bench.Scenario
	for _, n := range names {
		i := slices.IndexFunc(all, func(s bench.Scenario) bool { return s.Name == n })
		if i < 0 {
			known := make([]string, len(all))
			for j, s := range all {
				known[j] = s.Name
			}
			return usagef("unknown scenario %q (known: %s)", n, strings.Join(known, ", "))
		}
		run = append(run, all[i])
	}
	if len(names) == 0 {
		run = all
	}
	if len(run) == 0 {
		fmt.Fprintln(stdout, "no scenarios are registered in this build; nothing to run")
		return nil
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	have := services{"postgres": *pg, "sqs": *sqsEP, "sqlserver": *sqlServer}
	var results []bench.Result
	var ran, failed, skipped []string
	for i, s := range run {
		if missing := have.missing(s); missing != "" {
			fmt.Fprintf(stderr, "skip %s: needs %s\n", s.Name, missing)
			skipped = append(skipped, s.Name)
			continue
		}
		bar := newProgressBar(stderr, fmt.Sprintf("[%d/%d] %s", i+1, len(run), s.Name))
		start := time.Now()
		var notes remarks
		env := bench.Env{PostgresURL: *pg, SQSEndpoint: *sqsEP, SQLServerURL: *sqlServer, Scale: *scale,
			Progress: bar.update, Note: notes.add}
		rs, err := s.Run(ctx, env)
		bar.done(err)
		for _, n := range notes.list() {
			fmt.Fprintf(stdout, "note: %s: %s\n", s.Name, n)
		}
		if err != nil {
			failed = append(failed, s.Name)
			fmt.Fprintf(stderr, "%s failed after %s: %v\n", s.Name, time.Since(start).Round(time.Millisecond), err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		for j := range rs {
			if rs[j].Scenario == "" {
				rs[j].Scenario = s.Name
			}
		}
		ran = append(ran, s.Name)
		results = append(results, rs...)
		printResults(stdout, rs)
	}
	merged := mergeResults(results, ran, *out)
	sort.SliceStable(merged, func(i, j int) bool { return merged[i].Scenario < merged[j].Scenario })
	if len(ran) > 0 {
		b, err := json.MarshalIndent(benchFile{GeneratedAt: time.Now().UTC(), Scale: *scale, Results: merged}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(*out, resultsFile), append(b, '\n'), 0o644); err != nil {
			return err
		}
		files, err := writeCharts(*out, merged)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s and %d chart(s) to %s\n", resultsFile, len(files), *out)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d scenario(s) failed: %s", len(failed), strings.Join(failed, ", "))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(skipped) > 0 && !*allowSkip {
		return fmt.Errorf("%d scenario(s) skipped: %s (configure what they need, or pass --allow-skip)", len(skipped), strings.Join(skipped, ", "))
	}
	return nil
}

// remarks collects a scenario's bench.Env.Note remarks, each once.
type remarks struct {
	mu sync.Mutex
	rs []string
}

func (r *remarks) add(remark string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.rs, remark) {
		r.rs = append(r.rs, remark)
	}
}

func (r *remarks) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.rs)
}

// services maps each service a scenario may need to its URL or endpoint
// ("" when not configured).
type services map[string]string

// serviceFlags says how to configure each service.
var serviceFlags = map[string]string{
	"postgres":  "--postgres-url or BERTH_TEST_POSTGRES_URL",
	"sqs":       "--sqs-endpoint or BERTH_TEST_SQS_ENDPOINT",
	"sqlserver": "--sqlserver-url or BERTH_TEST_SQLSERVER_URL",
}

func serviceHint(n string) string {
	hint := serviceFlags[n]
	if hint == "" {
		hint = "unknown service"
	}
	return n + " (" + hint + ")"
}

// missing says what s needs that is not configured, or "" when it can run:
// every one of s.Needs and at least one of s.NeedsOneOf.
func (have services) missing(s bench.Scenario) string {
	var missing []string
	for _, n := range s.Needs {
		if have[n] == "" {
			missing = append(missing, serviceHint(n))
		}
	}
	if len(s.NeedsOneOf) > 0 && !slices.ContainsFunc(s.NeedsOneOf, func(n string) bool { return have[n] != "" }) {
		alts := make([]string, len(s.NeedsOneOf))
		for i, n := range s.NeedsOneOf {
			alts[i] = serviceHint(n)
		}
		missing = append(missing, strings.Join(alts, " or "))
	}
	return strings.Join(missing, ", ")
}

// needsText is what --list says a scenario needs.
func needsText(s bench.Scenario) string {
	parts := slices.Clone(s.Needs)
	if len(s.NeedsOneOf) > 0 {
		parts = append(parts, strings.Join(s.NeedsOneOf, " or "))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// resultKey identifies what a result replaces in results.json: its scenario
// on its database.
func resultKey(r bench.Result) string { return r.Scenario + "\x00" + r.Database }

// mergeResults returns results followed by those of dir's results.json that
// they do not replace: a scenario run this time replaces its earlier results
// on each database it produced results for (SQL Server results of a
// scenario stay when it ran on PostgreSQL alone), and every earlier result
// of a scenario that ran and produced none.
func mergeResults(results []bench.Result, ran []string, dir string) []bench.Result {
	merged := slices.Clone(results)
	prev, err := readResults(dir)
	if err != nil {
		return merged
	}
	produced := map[string]bool{}
	scenarios := map[string]bool{}
	for _, r := range results {
		produced[resultKey(r)] = true
		scenarios[r.Scenario] = true
	}
	for _, r := range prev.Results {
		replaced := produced[resultKey(r)] || slices.Contains(ran, r.Scenario) && !scenarios[r.Scenario]
		if !replaced {
			merged = append(merged, r)
		}
	}
	return merged
}

func readResults(dir string) (benchFile, error) {
	var f benchFile
	b, err := os.ReadFile(filepath.Join(dir, resultsFile))
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s: %w", filepath.Join(dir, resultsFile), err)
	}
	return f, nil
}

func printResults(w io.Writer, rs []bench.Result) {
	for _, r := range rs {
		keys := make([]string, 0, len(r.Metrics))
		for k := range r.Metrics {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + chart.FormatValue(r.Metrics[k])
		}
		fmt.Fprintf(w, "%-24s %-18s instances=%-3d messages=%-8d %s  %s\n", scenarioOn(r), r.Strategy, r.Instances, r.Messages, r.Duration.Round(time.Millisecond), strings.Join(parts, " "))
	}
}

// scenarioOn names r's scenario with its database when that is not the
// scenario's usual one: "sql/drain", "sql/drain on sqlserver".
func scenarioOn(r bench.Result) string {
	if r.Database == "" {
		return r.Scenario
	}
	return r.Scenario + " on " + r.Database
}

// chartFile turns a scenario name into a file name stem: "sql/drain" →
// "sql-drain", "sql/drain on sqlserver" → "sql-drain-on-sqlserver".
func chartFile(scenario, kind string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(scenario) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return b.String() + "-" + kind + ".svg"
}

// writeCharts draws, per scenario, a grouped bar chart of each bar metric
// present (groups: instance counts; bars: strategies) and line charts of
// heap in use and of RSS over time when any result has those series. It returns the files
// written, sorted.
func writeCharts(dir string, rs []bench.Result) ([]string, error) {
	// One set of charts per scenario and database: "sql/drain" (PostgreSQL)
	// and "sql/drain on sqlserver".
	byScenario := map[string][]bench.Result{}
	for _, r := range rs {
		byScenario[scenarioOn(r)] = append(byScenario[scenarioOn(r)], r)
	}
	var files []string
	write := func(name string, c interface{ WriteSVG(io.Writer) error }) error {
		var b bytes.Buffer
		if err := c.WriteSVG(&b); err != nil {
			return err
		}
		files = append(files, name)
		return os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644)
	}
	for sc, list := range byScenario {
		for _, m := range []struct{ key, kind, title, y string }{
			{metricThroughput, "throughput", "throughput", "messages/s"},
			{metricRoundTrips, "round-trips", "round trips per message", "round trips / message"},
		} {
			if c, ok := barChart(sc, list, m.key); ok {
				c.Title, c.YLabel = sc+": "+m.title, m.y
				if err := write(chartFile(sc, m.kind), c); err != nil {
					return nil, err
				}
			}
		}
		for _, m := range []struct{ key, kind, title, y string }{
			{seriesHeap, "heap", "heap in use over time", "heap in use (MiB)"},
			{seriesRSS, "rss", "resident set over time", "RSS (MiB)"},
		} {
			if c, ok := seriesChart(sc, list, m.key); ok {
				c.Title, c.YLabel = sc+": "+m.title, m.y
				if err := write(chartFile(sc, m.kind), c); err != nil {
					return nil, err
				}
			}
		}
	}
	sort.Strings(files)
	return files, nil
}

func barChart(sc string, rs []bench.Result, key string) (chart.Bars, bool) {
	var insts []int
	var strategies []string
	vals := map[string]map[int]float64{}
	for _, r := range rs {
		v, ok := r.Metrics[key]
		if !ok {
			continue
		}
		if !slices.Contains(insts, r.Instances) {
			insts = append(insts, r.Instances)
		}
		if !slices.Contains(strategies, r.Strategy) {
			strategies = append(strategies, r.Strategy)
			vals[r.Strategy] = map[int]float64{}
		}
		vals[r.Strategy][r.Instances] = v
	}
	if len(insts) == 0 {
		return chart.Bars{}, false
	}
	slices.Sort(insts)
	c := chart.Bars{XLabel: "instances"}
	for _, n := range insts {
		c.Groups = append(c.Groups, strconv.Itoa(n))
	}
	for _, s := range strategies {
		sr := chart.Series{Name: s}
		for _, n := range insts {
			v, ok := vals[s][n]
			if !ok {
				v = math.NaN()
			}
			sr.Values = append(sr.Values, v)
		}
		c.Series = append(c.Series, sr)
	}
	return c, true
}

// seriesChart draws one line per result that has the series key (bytes),
// in MiB against seconds.
func seriesChart(sc string, rs []bench.Result, key string) (chart.Lines, bool) {
	c := chart.Lines{XLabel: "seconds"}
	for _, r := range rs {
		pts := r.Series[key]
		if len(pts) == 0 {
			continue
		}
		name := r.Strategy
		if r.Instances > 1 {
			name += fmt.Sprintf(" ×%d", r.Instances)
		}
		l := chart.Line{Name: name}
		for _, p := range pts {
			l.Points = append(l.Points, chart.XY{X: p.At.Seconds(), Y: p.Value / (1 << 20)})
		}
		c.Lines = append(c.Lines, l)
	}
	return c, len(c.Lines) > 0
}

// progressBar draws one line on w, rewritten in place, at most ten times
// a second.
type progressBar struct {
	mu    sync.Mutex
	w     io.Writer
	label string
	last  time.Time
	frac  float64
	start time.Time
	width int
}

func newProgressBar(w io.Writer, label string) *progressBar {
	p := &progressBar{w: w, label: label, start: time.Now()}
	p.update(0, "starting")
	return p
}

func (p *progressBar) update(frac float64, status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	frac = min(max(frac, 0), 1)
	if now.Sub(p.last) < 100*time.Millisecond && frac < 1 && frac-p.frac < 0.05 {
		return
	}
	p.last, p.frac = now, frac
	p.draw(status)
}

func (p *progressBar) draw(status string) {
	const n = 30
	full := int(p.frac * n)
	line := fmt.Sprintf("\r%s [%s%s] %3.0f%% %6s %s", p.label, strings.Repeat("#", full), strings.Repeat("-", n-full), p.frac*100,
		time.Since(p.start).Round(time.Second), oneLine(status, 40))
	pad := max(p.width-len(line), 0)
	p.width = len(line)
	fmt.Fprint(p.w, line+strings.Repeat(" ", pad))
}

func (p *progressBar) done(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	status := "done"
	if err == nil {
		p.frac = 1
	} else {
		status = "failed"
		if errors.Is(err, context.Canceled) {
			status = "interrupted"
		}
	}
	p.draw(status)
	fmt.Fprintln(p.w)
}
