package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// berth console's command-line mistakes exit 2 with one line, before
// anything is opened or listened on.
func TestConsoleUsage(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "q.db")
	t.Setenv("BERTH_CONSOLE_TOKEN", "")
	t.Setenv("BERTH_CONSOLE_USER", "")
	t.Setenv("BERTH_CONSOLE_PASSWORD", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"console", "--url", "mem://"}, "mem:// queues live inside one process"},
		{[]string{"console", "--url", db, "--addr", "0.0.0.0:8080"}, "refusing to listen on a non-loopback address without credentials: 0.0.0.0:8080 (set BERTH_CONSOLE_TOKEN"},
		{[]string{"console", "--url", db, "--addr", ":8080"}, "refusing to listen"},
		{[]string{"console", "--url", db, "--sample", "10ms"}, "--sample must be at least 1s"},
		{[]string{"console"}, "--url is required"},
		{[]string{"console", "--url", db, "--health-url", "http://svc:8081/healthz", "--health-url", "svc:8081/healthz"}, `--health-url "svc:8081/healthz": want an absolute http:// or https:// URL`},
	} {
		code, stdout, stderr := runCmd(t, tc.args...)
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tc.want) || !strings.HasPrefix(stderr, "berth console: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line containing %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
	// With credentials a non-loopback address passes the check (and then
	// fails on the missing database, which Open never creates).
	t.Setenv("BERTH_CONSOLE_USER", "ops")
	t.Setenv("BERTH_CONSOLE_PASSWORD", "pw")
	if code, _, stderr := runCmd(t, "console", "--url", db, "--addr", "0.0.0.0:0"); code != 1 || !strings.Contains(stderr, "no such database") {
		t.Errorf("with credentials: exit %d, %q", code, stderr)
	}
}
