package main

import (
	"bytes"
	"context"
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

func TestDemoBadInput(t *testing.T) {
	cases := map[string]struct {
		args []string
		code int
	}{
		"unknown scheme":   {[]string{"demo", "--url", "nosuch://x"}, 1},
		"bad parameter":    {[]string{"demo", "--url", "mem://x?concurrency=-5"}, 1},
		"unreachable":      {[]string{"demo", "--url", "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", "--timeout", "20s"}, 1},
		"bad messages":     {[]string{"demo", "--messages", "0"}, 2},
		"unknown flag":     {[]string{"demo", "--frobnicate"}, 1},
		"unknown command":  {[]string{"frobnicate"}, 2},
		"no command":       {nil, 2},
		"dlq no sub":       {[]string{"dlq"}, 2},
		"dlq bad sub":      {[]string{"dlq", "frob"}, 2},
		"dlq show no id":   {[]string{"dlq", "show", "--url", "sqlite://:memory:"}, 2},
		"dlq bad filter":   {[]string{"dlq", "list", "--url", "sqlite://:memory:", "--filter", "older=yesterday"}, 2},
		"queues no url":    {[]string{"queues"}, 2},
		"queues bad url":   {[]string{"queues", "--url", "nosuch://x"}, 1},
		"queues bad param": {[]string{"queues", "--url", "sqlite://:memory:?frob=1"}, 1},
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
		})
	}
}

func TestHelp(t *testing.T) {
	cmds := [][]string{
		{"demo"}, {"migrate"}, {"queues"}, {"health"}, {"bench"},
		{"dlq", "list"}, {"dlq", "show"}, {"dlq", "replay"}, {"dlq", "purge"},
	}
	for _, c := range cmds {
		code, _, errs := runCmd(t, append(c, "--help")...)
		if code != 0 {
			t.Fatalf("%v --help: exit %d", c, code)
		}
		if !strings.Contains(errs, "Usage: berth "+c[0]) || !strings.Contains(errs, "Flags:") {
			t.Fatalf("%v --help lacks usage or flags:\n%s", c, errs)
		}
	}
	code, out, _ := runCmd(t, "help")
	if code != 0 || !strings.Contains(out, "berth dlq") {
		t.Fatalf("help: exit %d\n%s", code, out)
	}
}
