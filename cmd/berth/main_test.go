package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The AWS SDK's and database/sql's idle connections close lazily.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

// runCmd runs the berth command line and returns its exit code and output.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// mustRun runs the command line and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("berth %s: exit %d\nstderr: %s\nstdout: %s", strings.Join(args, " "), code, errs, out)
	}
	return out
}

func TestDemoRunsToSummary(t *testing.T) {
	out := mustRun(t, "demo", "--messages", "50", "--rate", "2000", "--fail", "0.2")
	for _, want := range []string{"Summary", "handled", "lost                       0", "audit batches", "dead-lettered", "health endpoint"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

// On mem:// the demo applies its short retry defaults like everywhere else
// (it used to leave them out there: poison orders then waited out ten
// attempts with backoff up to 25.6s, about 54s in all). The defaults it
// added are checked, not the time it took: speed is for benchmarks.
func TestDemoMemAppliesRetryDefaults(t *testing.T) {
	out := mustRun(t, "demo", "--url", "mem://fast", "--messages", "100", "--rate", "2000", "--poison", "0.2", "--health-addr", "")
	for _, want := range []string{
		"\ntransport                  mem://fast (max_attempts=3 retry_delay=20ms added)\n",
		"\nlost                       0\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

// Ctrl-C before every order settled: the summary still prints, the orders
// not settled are in flight (not lost), and the exit code is 1.
func TestDemoInterruptedReportsInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errs := newRecorder(), newRecorder()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--url", "mem://interrupted", "--messages", "1000", "--rate", "200", "--fail", "0.5", "--health-addr", ""}, out, errs)
	}()
	out.waitMatch(t, regexp.MustCompile(`^ +\d+\.\ds  published `)) // a first progress line
	cancel()
	if code := <-done; code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	summary := summaryOf(t, out.String())
	if _, ok := summary["lost"]; ok {
		t.Fatalf("an interrupted run reports lost orders:\n%s", out)
	}
	inFlight := summary["in flight"]
	n, rest, _ := strings.Cut(inFlight, " ")
	if rest != "(not settled when interrupted; they stay on the queue)" {
		t.Fatalf("in flight line: %q\n%s", inFlight, out)
	}
	if atoi(t, summary["published"]) != atoi(t, summary["handled"])+atoi(t, summary["dead-lettered"])+atoi(t, n) {
		t.Fatalf("published ≠ handled + dead-lettered + in flight:\n%s", out)
	}
	if want := "interrupted: stopping…"; !strings.Contains(out.String(), "\n"+want+"\n") {
		t.Fatalf("output lacks %q:\n%s", want, out)
	}
	if want := "berth demo: interrupted with " + n + " order(s) in flight\n"; errs.String() != want {
		t.Fatalf("stderr %q, want %q", errs.String(), want)
	}
}

// summaryOf returns the demo summary's rows by label.
func summaryOf(t *testing.T, out string) map[string]string {
	t.Helper()
	_, table, ok := strings.Cut(out, "\nSummary")
	if !ok {
		t.Fatalf("no summary:\n%s", out)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(table, "\n")[1:] {
		label, value, ok := strings.Cut(l, "  ")
		if !ok {
			break
		}
		rows[label] = strings.TrimSpace(value)
	}
	return rows
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.Fields(s)[0])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The sample output in docs/getting-started.md is what `berth demo`
// prints: the same lines in the same order, numbers, durations and the port
// aside; the progress lines, whose count varies, only in their form.
func TestGettingStartedSampleOutput(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(doc), "a summary table ends the run")
	_, block, _ := strings.Cut(after, "```\n")
	block, _, _ = strings.Cut(block, "```")
	sample, sampleProgress := demoLines(block)
	if len(sample) < 10 || len(sampleProgress) == 0 {
		t.Fatalf("no sample output found in docs/getting-started.md:\n%s", block)
	}

	t.Setenv("TMPDIR", "/tmp") // the sample's temporary file is under /tmp
	out := mustRun(t, "demo")
	got, progress := demoLines(out)
	if !slices.Equal(got, sample) {
		t.Fatalf("the demo's output differs from the sample's (normalized):\n%s\nsample:\n%s\noutput:\n%s",
			strings.Join(got, "\n"), strings.Join(sample, "\n"), out)
	}
	for _, l := range sampleProgress {
		if l != progress[0] {
			t.Fatalf("the sample's progress line\n%s\nis not the demo's\n%s", l, progress[0])
		}
	}
}

// demoLines splits the demo's output into its normalized lines, progress
// lines apart.
func demoLines(out string) (lines, progress []string) {
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		l = normalize(l)
		if progressLine.MatchString(l) {
			progress = append(progress, l)
		} else {
			lines = append(lines, l)
		}
	}
	return lines, progress
}

// normalize replaces durations with D and other numbers with N, and runs
// of spaces with one.
func normalize(l string) string {
	l = durations.ReplaceAllString(l, "D")
	l = numbers.ReplaceAllString(l, "N")
	return spaces.ReplaceAllString(l, " ")
}

var (
	// commandWord is berth as a command name ("berth demo:", "berth:"), not
	// in a path such as github.com/berth-go/berth/transport/all.
	commandWord  = regexp.MustCompile(`\bberth[ :]`)
	progressLine = regexp.MustCompile(`^ ?D published `)
	durations    = regexp.MustCompile(`\b\d+(\.\d+)?(ms|µs|s)\b`)
	numbers      = regexp.MustCompile(`\d+(\.\d+)?`)
	spaces       = regexp.MustCompile(` +`)
)

func TestDemoBadInput(t *testing.T) {
	cases := map[string]struct {
		args []string
		code int
	}{
		"unknown scheme":   {[]string{"demo", "--url", "nosuch://x"}, 2},
		"bad parameter":    {[]string{"demo", "--url", "sqlite://:memory:?concurrency=-5"}, 2},
		"unreachable":      {[]string{"demo", "--url", "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", "--timeout", "20s"}, 1},
		"bad messages":     {[]string{"demo", "--messages", "0"}, 2},
		"unknown flag":     {[]string{"demo", "--frobnicate"}, 2},
		"unknown command":  {[]string{"frobnicate"}, 2},
		"no command":       {nil, 2},
		"dlq no sub":       {[]string{"dlq"}, 2},
		"dlq bad sub":      {[]string{"dlq", "frob"}, 2},
		"dlq show no id":   {[]string{"dlq", "show", "--url", "sqlite://:memory:"}, 2},
		"dlq bad filter":   {[]string{"dlq", "list", "--url", "sqlite://:memory:", "--filter", "older=yesterday"}, 2},
		"queues no url":    {[]string{"queues"}, 2},
		"queues bad url":   {[]string{"queues", "--url", "nosuch://x"}, 2},
		"queues bad param": {[]string{"queues", "--url", "sqlite://:memory:?frob=1"}, 2},
		"migrate mem":      {[]string{"migrate", "--url", "mem://x"}, 1},
		"migrate pg down":  {[]string{"migrate", "--url", "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}, 1},
		"sqs down":         {[]string{"queues", "--url", "sqs://test:test@127.0.0.1:1?region=us-east-1&request_attempts=1"}, 1},
		"health no addr":   {[]string{"health"}, 2},
		"health bad addr":  {[]string{"health", "--addr", "ftp://x"}, 2},
		"health down":      {[]string{"health", "--addr", "http://127.0.0.1:1"}, 1},
		"bench bad scale":  {[]string{"bench", "--scale", "0"}, 2},
		"bench unknown":    {[]string{"bench", "--scenario", "no/such"}, 2},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errs := runCmd(t, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d for %v\nstderr: %s\nstdout: %s", code, c.code, c.args, errs, out)
			}
			if errs == "" {
				t.Fatal("no error message")
			}
			if c.args != nil && (strings.Count(errs, "\n") != 1 || len(commandWord.FindAllString(errs, -1)) != 1) {
				t.Fatalf("stderr is not one line naming berth once:\n%s", errs)
			}
		})
	}
}

// A command-line mistake exits 2 with one line: the command, the error and
// a hint; never the whole usage, never the error twice.
func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--frobnicate"}, "berth demo: unknown flag --frobnicate; see --help"},
		{[]string{"demo", "--messages", "x"}, `berth demo: invalid value "x" for --messages: parse error; see --help`},
		{[]string{"demo", "--messages"}, "berth demo: flag --messages needs a value; see --help"},
		{[]string{"demo", "--hold", "-1s"}, "berth demo: --hold must be ≥ 0; see --help"},
		{[]string{"demo", "--hold", "1m", "--health-addr", ""}, "berth demo: --hold keeps the health endpoint up: it needs --health-addr; see --help"},
		{[]string{"demo", "extra"}, `berth demo: unexpected argument "extra"; see --help`},
		{[]string{"queues", "--limit", "3"}, "berth queues: unknown flag --limit; see --help"},
		{[]string{"queues", "--json=maybe"}, `berth queues: invalid boolean value "maybe" for --json: parse error; see --help`},
		{[]string{"migrate", "--frob"}, "berth migrate: unknown flag --frob; see --help"},
		{[]string{"health", "--timeout", "soon"}, `berth health: invalid value "soon" for --timeout: parse error; see --help`},
		{[]string{"bench", "--scale", "0"}, "berth bench: --scale must be > 0; see --help"},
		{[]string{"dlq"}, "berth dlq: missing subcommand: list, show, replay or purge; see --help"},
		{[]string{"dlq", "lst"}, `berth dlq: unknown subcommand "lst": want list, show, replay or purge; see --help`},
		{[]string{"dlq", "show"}, "berth dlq show: needs exactly one ID; see --help"},
		{[]string{"dlq", "show", "1", "--limit", "3"}, "berth dlq show: unknown flag --limit; see --help"},
		{[]string{"dlq", "list", "--limit", "-1", "--url", "sqlite://:memory:"}, "berth dlq list: --limit must be ≥ 0 (0: all), got -1; see --help"},
		{[]string{"dlq", "list", "--url", "nosuch://x"}, `berth dlq list: unknown URL scheme: "nosuch" has no queues to inspect (want postgres://, sqlite://, sqlserver:// or sqs://); see --help`},
		{[]string{"frobnicate"}, `berth: unknown command "frobnicate" (commands: demo, migrate, queues, groups, dlq, pause, resume, console, health, bench)`},
	}
	for _, c := range cases {
		code, out, errs := runCmd(t, c.args...)
		if code != 2 || errs != c.want+"\n" || out != "" {
			t.Errorf("berth %s: exit %d\nstderr: %q\nwant:   %q\nstdout: %q", strings.Join(c.args, " "), code, errs, c.want+"\n", out)
		}
	}
}

func TestHelp(t *testing.T) {
	cmds := [][]string{
		{"demo"}, {"migrate"}, {"queues"}, {"health"}, {"bench"},
		{"dlq", "list"}, {"dlq", "show"}, {"dlq", "replay"}, {"dlq", "purge"},
	}
	for _, c := range cmds {
		code, out, errs := runCmd(t, append(c, "--help")...)
		if code != 0 || out != "" {
			t.Fatalf("%v --help: exit %d, stdout %q", c, code, out)
		}
		if !strings.HasPrefix(errs, "Usage: berth "+strings.Join(c, " ")) || strings.Count(errs, "Usage:") != 1 || !strings.Contains(errs, "Flags:") {
			t.Fatalf("%v --help lacks usage or flags:\n%s", c, errs)
		}
	}
	code, out, _ := runCmd(t, "help")
	if code != 0 || !strings.Contains(out, "berth dlq") {
		t.Fatalf("help: exit %d\n%s", code, out)
	}
	code, _, errs := runCmd(t, "dlq", "--help")
	if code != 0 || !strings.Contains(errs, "berth dlq show ID") {
		t.Fatalf("dlq --help: exit %d\n%s", code, errs)
	}
}

// berth dlq show --help lists what show accepts (--url, --json) and nothing
// of the other subcommands' (filters, --limit, --dry-run).
func TestDlqShowHelp(t *testing.T) {
	_, _, errs := runCmd(t, "dlq", "show", "--help")
	if !strings.HasPrefix(errs, "Usage: berth dlq show ID [--url URL] [--json]\n") {
		t.Fatalf("dlq show --help:\n%s", errs)
	}
	var flags []string
	for _, l := range strings.Split(errs, "\n") {
		if strings.HasPrefix(l, "  -") {
			flags = append(flags, strings.Fields(l)[0])
		}
	}
	if !slices.Equal(flags, []string{"-json", "-url"}) {
		t.Fatalf("dlq show --help lists flags %v, want -json and -url:\n%s", flags, errs)
	}
	for _, other := range []string{"--queue", "--reason", "--older-than", "--filter", "--limit", "--dry-run", "Filters"} {
		if strings.Contains(errs, other) {
			t.Fatalf("dlq show --help mentions %s:\n%s", other, errs)
		}
	}
}
