package console_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/berth-go/berth/console"
	"github.com/berth-go/berth/internal/inspect/inspecttest"
)

type historyJSON struct {
	History []struct {
		At    time.Time `json:"at"`
		Ready int64     `json:"ready"`
	} `json:"history"`
}

// A console restarted over the same database shows the samples the one
// before it stored (one a minute), a read-only console reads them and
// writes none, and samples older than HistoryKeep are deleted.
func TestHistorySurvivesRestart(t *testing.T) { sqlURLs(t, testHistorySurvivesRestart) }

func testHistorySurvivesRestart(t *testing.T, rawURL string) {
	src := open(t, rawURL)
	names := inspecttest.Seed(t, src, seedQueues()...)
	queue := names[0]
	ctx := context.Background()
	base := time.Now().Truncate(time.Minute)
	at := base.Add(-5 * time.Hour)
	clock := func() time.Time { return at }

	newConsole := func(cfg console.Config) (*console.Server, *httptest.Server) {
		t.Helper()
		cfg.Source, cfg.Kind, cfg.Now = src, src.Kind, clock
		srv, err := console.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv.Handler())
		t.Cleanup(hs.Close)
		return srv, hs
	}
	history := func(hs *httptest.Server) []time.Time {
		t.Helper()
		code, body := do(t, "GET", hs.URL+"/api/queues/"+queue, "")
		if code != 200 {
			t.Fatalf("GET /api/queues/%s: %d %s", queue, code, body)
		}
		var h historyJSON
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatal(err)
		}
		var out []time.Time
		for _, s := range h.History {
			if s.Ready != 4 {
				t.Errorf("sample at %s: ready %d, want 4", s.At, s.Ready)
			}
			out = append(out, s.At)
		}
		return out
	}

	// The first console samples at -5h, -5h+20s (the same minute: stored
	// once) and -3h.
	first, _ := newConsole(console.Config{})
	for _, a := range []time.Time{base.Add(-5 * time.Hour), base.Add(-5*time.Hour + 20*time.Second), base.Add(-3 * time.Hour)} {
		at = a
		first.SampleNow(ctx)
	}
	stored, err := src.History(ctx, base.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var mine int
	for _, s := range stored {
		if s.Queue == queue {
			mine++
		}
	}
	if mine != 2 {
		t.Fatalf("stored %d samples of %s, want 2 (one a minute): %+v", mine, queue, stored)
	}

	// A read-only console started later shows them before its own sample,
	// and stores nothing.
	at = base
	ro, roHTTP := newConsole(console.Config{ReadOnly: true})
	ro.SampleNow(ctx)
	got := history(roHTTP)
	want := []time.Time{base.Add(-5 * time.Hour), base.Add(-3 * time.Hour), base}
	if len(got) != len(want) {
		t.Fatalf("read-only console after restart: history %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("sample %d at %s, want %s", i, got[i], want[i])
		}
	}
	if after, _ := src.History(ctx, base.Add(-time.Minute)); len(after) != 0 {
		t.Errorf("a read-only console stored %d samples", len(after))
	}

	// A read-write console with a 4 h keep drops the -5 h sample from
	// the database.
	rw, rwHTTP := newConsole(console.Config{HistoryKeep: 4 * time.Hour})
	rw.SampleNow(ctx)
	if got := history(rwHTTP); len(got) != 2 || !got[0].Equal(base.Add(-3*time.Hour)) {
		t.Errorf("with a 4h keep: history %v", got)
	}
	stored, err = src.History(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stored {
		if s.At.Before(base.Add(-4 * time.Hour)) {
			t.Errorf("a sample older than the keep is still stored: %+v", s)
		}
	}

	// NoStoredHistory reads nothing.
	mem, memHTTP := newConsole(console.Config{NoStoredHistory: true})
	mem.SampleNow(ctx)
	if got := history(memHTTP); len(got) != 1 {
		t.Errorf("NoStoredHistory: history %v, want this console's one sample", got)
	}
}
