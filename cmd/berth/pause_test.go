package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// berth pause and resume on a SQLite file the demo filled: queues shows
// PAUSED; repeating says so; an unknown queue fails; SQS is refused.
func TestPauseResumeCommands(t *testing.T) {
	u := "sqlite://" + filepath.Join(t.TempDir(), "q.db")
	mustRun(t, "demo", "--url", u, "--topic", "jobs", "--messages", "5", "--rate", "2000", "--fail", "0", "--poison", "0", "--health-addr", "")
	if out := mustRun(t, "pause", "--url", u, "--queue", "jobs", "--by", "deploy"); out != "paused berth_q_jobs\n" {
		t.Fatalf("pause: %q", out)
	}
	if out := mustRun(t, "pause", "--url", u, "--queue", "berth_q_jobs"); out != "berth_q_jobs was already paused\n" {
		t.Fatalf("second pause: %q", out)
	}
	out := mustRun(t, "queues", "--url", u)
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "PAUSED") || !strings.Contains(out, "paused") {
		t.Fatalf("queues:\n%s", out)
	}
	if out := mustRun(t, "queues", "--url", u, "--json"); !strings.Contains(out, `"Paused": true`) || !strings.Contains(out, `"PausedBy": "deploy"`) {
		t.Fatalf("queues --json:\n%s", out)
	}
	if out := mustRun(t, "resume", "--url", u, "--queue", "jobs"); out != "resumed berth_q_jobs\n" {
		t.Fatalf("resume: %q", out)
	}
	if out := mustRun(t, "queues", "--url", u); strings.Contains(out, " paused") {
		t.Fatalf("queues after resume:\n%s", out)
	}
	for args, want := range map[string]struct {
		code int
		says string
	}{
		"pause --queue nope":   {1, "not a queue"},
		"pause":                {2, "--queue is required"},
		"resume --queue x sqs": {1, "SQL transports only"},
	} {
		argv := strings.Fields(args)
		url := u
		if argv[len(argv)-1] == "sqs" {
			argv, url = argv[:len(argv)-1], "sqs://test:test@127.0.0.1:1?region=us-east-1"
		}
		code, _, stderr := runCmd(t, append(argv, "--url", url)...)
		if code != want.code || !strings.Contains(stderr, want.says) {
			t.Errorf("%s: exit %d, %q; want %d with %q", args, code, stderr, want.code, want.says)
		}
	}
}
