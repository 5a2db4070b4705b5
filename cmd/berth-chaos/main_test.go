package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBadFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--bogus"}, &out, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}

// TestSmallSQLiteRun runs the harness end to end on a temporary SQLite
// database and checks that the ledger is printed and clean.
func TestSmallSQLiteRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the harness for a few seconds")
	}
	var out, errOut bytes.Buffer
	code := run([]string{"--transport", "sqlite", "--url", t.TempDir(), "--messages", "300", "--duration", "3s", "--poison-every", "100"}, &out, &errOut)
	t.Log(out.String(), errOut.String())
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"berth chaos ledger: sqlite", "lost                 0", "verdict              OK"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
