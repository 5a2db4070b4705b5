package chaos

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
)

// The reduced-size harness: a few thousand messages and about 20 s of faults
// per transport, inside `make test`. The full size is
// `go run ./cmd/berth-chaos` (docs/reliability.md).
func runReduced(t *testing.T, cfg Config) {
	t.Helper()
	if testing.Short() {
		t.Skip("the chaos harness needs services; not in -short mode")
	}
	if cfg.Messages == 0 {
		cfg.Messages = 2000
	}
	if cfg.Duration == 0 {
		cfg.Duration = 20 * time.Second
	}
	cfg.PoisonEvery = 250
	cfg.FaultInterval = 700 * time.Millisecond
	cfg.FaultLength = time.Second
	cfg.DrainWait = time.Minute
	if testing.Verbose() {
		cfg.Progress = tWriter{t}
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	t.Log("\n" + b.String())
	// go test shows a passing package's output only with -v; with
	// BERTH_CHAOS_LEDGER_DIR set (scripts/test.sh), the ledger is also
	// written there to be printed after the run.
	if dir := os.Getenv("BERTH_CHAOS_LEDGER_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err == nil {
			_ = os.WriteFile(filepath.Join(dir, t.Name()+".txt"), []byte(b.String()), 0o644)
		}
	}
	if !rep.OK() {
		t.Fatalf("the ledger shows problems (seed %d): %v", rep.Seed, rep.Problems)
	}
	if cfg.Effects && (!rep.Effects.Checked || rep.Effects.Once != rep.Counts.Published-rep.Counts.Poison) {
		t.Errorf("effects: %+v, want every one of %d non-poison messages once", rep.Effects, rep.Counts.Published-rep.Counts.Poison)
	}
	if len(rep.Faults) < 5 {
		t.Errorf("only %d faults were injected", len(rep.Faults))
	}
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestChaosPostgres(t *testing.T) {
	runReduced(t, Config{Transport: "postgres", URL: testenv.PostgresURL(t)})
}

func TestChaosSQLite(t *testing.T) {
	runReduced(t, Config{Transport: "sqlite", URL: t.TempDir()})
}

func TestChaosSQS(t *testing.T) {
	runReduced(t, Config{Transport: "sqs", URL: testenv.SQSEndpoint(t), Messages: 1500})
}

// TestChaosEffects runs the harness with Config.Effects: every handler's
// effect is a counter written in the handler's transaction (PostgreSQL,
// SQLite) or the inbox's (SQS), and every counter must end at exactly 1
// through the kills, cut connections, lost leases and handler failures.
func TestChaosEffects(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(t *testing.T) Config
	}{
		{"postgres", func(t *testing.T) Config { return Config{Transport: "postgres", URL: testenv.PostgresURL(t)} }},
		{"sqlite", func(t *testing.T) Config { return Config{Transport: "sqlite", URL: t.TempDir()} }},
		{"sqs", func(t *testing.T) Config {
			return Config{Transport: "sqs", URL: testenv.SQSEndpoint(t), Messages: 1000}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg(t)
			cfg.Effects = true
			if cfg.Messages == 0 {
				cfg.Messages = 1500
			}
			cfg.Duration = 12 * time.Second
			runReduced(t, cfg)
		})
	}
}

func TestConfigValidate(t *testing.T) {
	err := (&Config{Transport: "kafka", Instances: 99, MaxAttempts: 2}).Validate()
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"Transport", "URL", "Instances", "MaxAttempts"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
}
