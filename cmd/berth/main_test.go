package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestDemoRunsToSummary(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"demo", "--messages", "50", "--rate", "2000", "--fail", "0.2"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	s := out.String()
	for _, want := range []string{"Summary", "handled", "50", "lost", "0"} {
		if !strings.Contains(s, want) {
			t.Fatalf("output lacks %q:\n%s", want, s)
		}
	}
}

func TestDemoBadInput(t *testing.T) {
	cases := map[string][]string{
		"unknown scheme":  {"demo", "--url", "nosuch://x"},
		"bad parameter":   {"demo", "--url", "mem://x?concurrency=-5"},
		"bad messages":    {"demo", "--messages", "0"},
		"unknown command": {"frobnicate"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(context.Background(), args, &out, &errb); code == 0 {
				t.Fatalf("exit 0 for %v", args)
			}
			if errb.Len() == 0 {
				t.Fatal("no error message")
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(errb.String(), "-url") {
		t.Fatalf("help lacks -url: %s", errb.String())
	}
}
