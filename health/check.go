package health

import (
	"context"

	alexhealth "github.com/alexliesenfeld/health"
)

// Check returns a readiness check for github.com/alexliesenfeld/health over
// the listeners of src, with the default Config: it fails, with an error
// wrapping ErrNotReady, when any listener is not ready. Services that
// already use that library add Berth in one line:
//
//	checker := alexhealth.NewChecker(
//		alexhealth.WithCheck(health.Check("orders", subscriber)),
//	)
//
// The startup grace of listeners not started yet runs from the call to
// Check. For another Config or for pings, use a Handler's ReadyCheck and
// LiveCheck.
func Check(name string, src Source) alexhealth.Check {
	cfg := Config{}.WithDefaults()
	e := &evaluator{cfg: cfg, created: cfg.Clock.Now()}
	return alexhealth.Check{
		Name: name,
		Check: func(context.Context) error {
			r := Report{Health: Healthy, Live: true, Ready: true, Listeners: e.source(name, src, cfg.Clock.Now())}
			r.aggregate()
			return r.ReadyError()
		},
	}
}

// ReadyCheck returns a check for github.com/alexliesenfeld/health that fails,
// with an error wrapping ErrNotReady, when h's /readyz would answer 503:
// a listener of any source is not ready or a ping failed.
func (h *Handler) ReadyCheck(name string) alexhealth.Check {
	return alexhealth.Check{
		Name:  name,
		Check: func(ctx context.Context) error { return h.report(ctx, true).ReadyError() },
	}
}

// LiveCheck returns a check for github.com/alexliesenfeld/health that fails,
// with an error wrapping ErrNotLive, when h's /livez would answer 503: a
// listener has been faulted for longer than Config.FaultGrace. It calls no
// pinger.
func (h *Handler) LiveCheck(name string) alexhealth.Check {
	return alexhealth.Check{
		Name:  name,
		Check: func(ctx context.Context) error { return h.report(ctx, false).LiveError() },
	}
}
