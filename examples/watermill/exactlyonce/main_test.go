package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/testenv"
)

// TestMain lets the test binary play the example's roles: the driver
// starts its server and worker as children of os.Executable.
func TestMain(m *testing.M) {
	if os.Getenv("EXACTLYONCE_ROLE") != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestCounterExactlyOnce runs the original's run.go: requests sent while
// the worker is killed (SIGKILL) and, on PostgreSQL, its database
// connections cut; the counter must end at the number of requests.
func TestCounterExactlyOnce(t *testing.T) {
	for _, db := range testenv.SQLDatabases {
		t.Run(db, func(t *testing.T) {
			url := testenv.SQLURL(t, db)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			d := driver{URL: url, Messages: 400, Senders: 5,
				KillWorkerAt: []int{40, 200, 210}, CutDatabaseAt: []int{100, 300},
				Out: t.Logf,
			}
			n, err := d.run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n != d.Messages {
				t.Fatalf("counter %d, want %d", n, d.Messages)
			}
		})
	}
}
