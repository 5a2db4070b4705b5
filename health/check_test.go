package health

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	alexhealth "github.com/alexliesenfeld/health"

	"github.com/berth-go/berth/transport"
)

func newChecker(checks ...alexhealth.Check) alexhealth.Checker {
	opts := []alexhealth.CheckerOption{alexhealth.WithDisabledAutostart(), alexhealth.WithDisabledCache()}
	for _, c := range checks {
		opts = append(opts, alexhealth.WithCheck(c))
	}
	return alexhealth.NewChecker(opts...)
}

func TestCheck(t *testing.T) {
	src := &fakeSource{}
	now := time.Now()
	src.Set(accepting("orders.created", now))
	checker := newChecker(Check("orders", src))

	if res := checker.Check(context.Background()); res.Status != alexhealth.StatusUp {
		t.Fatalf("healthy listener: %+v", res)
	}

	busy := accepting("orders.created", now)
	busy.Status, busy.Latched = transport.StatusTooBusy, true
	src.Set(busy)
	if res := checker.Check(context.Background()); res.Status != alexhealth.StatusUp {
		t.Fatalf("too busy is ready: %+v", res)
	}

	faulted := accepting("orders.created", now)
	faulted.Faulted, faulted.Fault, faulted.FaultAt = true, "deliver: panic: boom", now
	src.Set(faulted)
	res := checker.Check(context.Background())
	if res.Status != alexhealth.StatusDown {
		t.Fatalf("faulted listener: %+v", res)
	}
	d := res.Details["orders"]
	if !errors.Is(d.Error, ErrNotReady) {
		t.Errorf("check error %v does not wrap ErrNotReady", d.Error)
	}
	if want := "berth: not ready: orders/orders.created: faulted: deliver: panic: boom"; d.Error.Error() != want {
		t.Errorf("check error %q, want %q", d.Error, want)
	}

	// Served by the library's own handler.
	srv := httptest.NewServer(alexhealth.NewHandler(checker))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("library handler: %d", resp.StatusCode)
	}
}

func TestHandlerChecks(t *testing.T) {
	f := newFixture(t, Config{FaultGrace: time.Second})
	s := accepting("orders.created", f.clock.Now())
	f.src.Set(s)
	pingErr := errors.New("refused")
	var failing bool
	if err := f.h.AddPinger("postgres", PingFunc(func(context.Context) error {
		if failing {
			return pingErr
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	ready := newChecker(f.h.ReadyCheck("berth"))
	live := newChecker(f.h.LiveCheck("berth"))
	status := func(c alexhealth.Checker) alexhealth.AvailabilityStatus { return c.Check(context.Background()).Status }

	if status(ready) != alexhealth.StatusUp || status(live) != alexhealth.StatusUp {
		t.Fatal("healthy: not up")
	}
	failing = true
	if status(ready) != alexhealth.StatusDown || status(live) != alexhealth.StatusUp {
		t.Fatal("ping failing: want ready down, live up")
	}
	failing = false

	s.Faulted, s.Fault, s.FaultAt = true, "boom", f.clock.Now()
	f.src.Set(s)
	f.clock.Advance(2 * time.Second)
	res := live.Check(context.Background())
	if res.Status != alexhealth.StatusDown || !errors.Is(res.Details["berth"].Error, ErrNotLive) {
		t.Fatalf("fault not rebuilt: %+v", res)
	}
}
