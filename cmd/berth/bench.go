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
	fs := newFlags("berth bench", "berth bench [--scenario NAME]… [--scale F] [--out DIR] [--list]", `
Runs Berth's benchmark scenarios with a progress bar on stderr, then writes
their results to DIR/results.json (merged with the results already there for
scenarios not run this time) and SVG charts to DIR: throughput and round
trips per message by strategy and instance count, and heap over time.
docs/benchmarks.md embeds the charts of docs/bench/.

Scenarios needing a service that is not configured are skipped with a
message. --charts-only redraws the charts from DIR/results.json.`, stderr)
	var names multi
	fs.Var(&names, "scenario", "run only this scenario (repeatable; default: all); see --list")
	scale := fs.Float64("scale", 1, "multiply sizes and durations (1 = the documented full size)")
	out := fs.String("out", filepath.Join("docs", "bench"), "directory for results.json and the SVG charts")
	pg := fs.String("postgres-url", os.Getenv("BERTH_TEST_POSTGRES_URL"), "PostgreSQL URL for the sql scenarios; default $BERTH_TEST_POSTGRES_URL")
	sqsEP := fs.String("sqs-endpoint", os.Getenv("BERTH_TEST_SQS_ENDPOINT"), "SQS endpoint for the sqs scenarios; default $BERTH_TEST_SQS_ENDPOINT")
	list := fs.Bool("list", false, "list the scenarios and exit")
	chartsOnly := fs.Bool("charts-only", false, "redraw the charts from DIR/results.json without running anything")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	names = append(names, pos...)
	if *scale <= 0 || math.IsNaN(*scale) || math.IsInf(*scale, 0) {
		return usagef("--scale must be > 0")
	}
	all := bench.Scenarios()
	if *list {
		if len(all) == 0 {
			fmt.Fprintln(stdout, "no scenarios are registered in this build")
		}
		for _, s := range all {
			needs := "none"
			if len(s.Needs) > 0 {
				needs = strings.Join(s.Needs, ", ")
			}
			fmt.Fprintf(stdout, "%s (needs: %s)\n    %s\n", s.Name, needs, s.Description)
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
	have := map[string]string{"postgres": *pg, "sqs": *sqsEP}
	flag := map[string]string{"postgres": "--postgres-url or BERTH_TEST_POSTGRES_URL", "sqs": "--sqs-endpoint or BERTH_TEST_SQS_ENDPOINT"}
	var results []bench.Result
	var ran []string
	var failed []string
	for i, s := range run {
		var missing []string
		for _, n := range s.Needs {
			if have[n] == "" {
				hint := flag[n]
				if hint == "" {
					hint = "unknown service"
				}
				missing = append(missing, n+" ("+hint+")")
			}
		}
		if len(missing) > 0 {
			fmt.Fprintf(stderr, "skip %s: needs %s\n", s.Name, strings.Join(missing, ", "))
			continue
		}
		bar := newProgressBar(stderr, fmt.Sprintf("[%d/%d] %s", i+1, len(run), s.Name))
		start := time.Now()
		rs, err := s.Run(ctx, bench.Env{PostgresURL: *pg, SQSEndpoint: *sqsEP, Scale: *scale, Progress: bar.update})
		bar.done(err)
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
	merged := results
	if prev, err := readResults(*out); err == nil {
		for _, r := range prev.Results {
			if !slices.Contains(ran, r.Scenario) {
				merged = append(merged, r)
			}
		}
	}
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
	return ctx.Err()
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
		fmt.Fprintf(w, "%-24s %-18s instances=%-3d messages=%-8d %s  %s\n", r.Scenario, r.Strategy, r.Instances, r.Messages, r.Duration.Round(time.Millisecond), strings.Join(parts, " "))
	}
}

// chartFile turns a scenario name into a file name stem: "sql/drain" →
// "sql-drain".
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
	byScenario := map[string][]bench.Result{}
	for _, r := range rs {
		byScenario[r.Scenario] = append(byScenario[r.Scenario], r)
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
