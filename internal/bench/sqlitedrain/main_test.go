package main

import (
	"context"
	"testing"
	"time"
)

// TestContenders drains a small backlog with every contender and checks
// each message is handled exactly once with no rows left, so that a broken
// contender fails CI rather than a benchmark run.
func TestContenders(t *testing.T) {
	cfg := config{Messages: 200, Size: 1024, Workers: 32, Handler: time.Millisecond, Timeout: 20 * time.Second}
	for _, c := range contenders {
		t.Run(c.name, func(t *testing.T) {
			cfg := cfg
			cfg.Dir = t.TempDir()
			r, err := runOne(context.Background(), c, cfg)
			if err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			if r.Duplicates != 0 || r.Missing != 0 || r.Left != 0 || r.MsgPerSec <= 0 {
				t.Fatalf("want every message handled once and none left: %s", r)
			}
		})
	}
}
