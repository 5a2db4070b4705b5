package health_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	alexhealth "github.com/alexliesenfeld/health"

	"github.com/berth-go/berth/health"
	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/mem" // registers mem://
)

// fixedClock makes the example's output deterministic.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

func (c fixedClock) After(time.Duration) <-chan time.Time { return nil }

// A subscriber with one listener whose receiver has just faulted: liveness
// still passes (the watchdog gets FaultGrace to rebuild it), readiness and
// the full report fail at once.
func ExampleHandler() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// In a service, this is the subscriber: *receiver.Subscriber or any
	// transport's subscriber.
	subscriber := health.SourceFunc(func() []transport.ListenerState {
		return []transport.ListenerState{{
			Name:        "orders.created",
			Status:      transport.StatusFaulted,
			Loop:        transport.LoopFaulted,
			QueueCount:  3,
			InFlight:    3,
			Faulted:     true,
			Fault:       "berth: dead-letter faulted: panic: nil map",
			FaultAt:     now.Add(-2 * time.Second),
			LastReceive: now.Add(-3 * time.Second),
			LastContact: now.Add(-3 * time.Second),
			Wave:        4,
			StartedAt:   now.Add(-time.Hour),
		}}
	})

	h, err := health.NewHandler(health.Config{Clock: fixedClock{now}})
	if err != nil {
		panic(err)
	}
	if err := h.AddSource("orders", subscriber); err != nil {
		panic(err)
	}
	// A broker connectivity check; for SQL, health.PingFunc(db.PingContext).
	if err := h.AddPinger("postgres", health.PingFunc(func(context.Context) error { return nil })); err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/", h) // serves /livez, /readyz, /healthz

	for _, path := range []string{"/livez", "/readyz"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, rec.Code)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	fmt.Println("/healthz", rec.Code)
	fmt.Print(rec.Body)
	// Output:
	// /livez 200
	// /readyz 503
	// /healthz 503
	// {
	//   "health": "unhealthy",
	//   "live": true,
	//   "ready": false,
	//   "checked_at": "2026-03-01T12:00:00Z",
	//   "listeners": [
	//     {
	//       "source": "orders",
	//       "name": "orders.created",
	//       "health": "unhealthy",
	//       "reason": "faulted",
	//       "live": true,
	//       "ready": false,
	//       "status": "faulted",
	//       "loop": "faulted",
	//       "queue_count": 3,
	//       "buffered": 0,
	//       "in_flight": 3,
	//       "batch_pending": 0,
	//       "latched": false,
	//       "faulted": true,
	//       "fault": {
	//         "cause": "berth: dead-letter faulted: panic: nil map",
	//         "at": "2026-03-01T11:59:58Z"
	//       },
	//       "rebuilds": 0,
	//       "last_receive": "2026-03-01T11:59:57Z",
	//       "last_contact": "2026-03-01T11:59:57Z",
	//       "contact_failing": false,
	//       "consecutive_failures": 0,
	//       "queue_missing": false,
	//       "wave": 4,
	//       "started_at": "2026-03-01T11:00:00Z"
	//     }
	//   ],
	//   "pings": [
	//     {
	//       "name": "postgres",
	//       "health": "healthy",
	//       "reason": "ok",
	//       "duration_ms": 0
	//     }
	//   ]
	// }
}

// A service that already uses github.com/alexliesenfeld/health adds Berth in
// one line.
func ExampleCheck() {
	subscriber := health.SourceFunc(func() []transport.ListenerState {
		return []transport.ListenerState{{
			Name:   "orders.created",
			Status: transport.StatusPaused,
		}}
	})

	checker := alexhealth.NewChecker(
		alexhealth.WithDisabledAutostart(),
		alexhealth.WithCheck(health.Check("orders", subscriber)),
	)
	res := checker.Check(context.Background())
	fmt.Println(res.Status)
	err := res.Details["orders"].Error
	fmt.Println(errors.Is(err, health.ErrNotReady))
	fmt.Println(err)
	// Output:
	// down
	// true
	// berth: not ready: orders/orders.created: paused
}

// A subscriber opened by URL goes to the handler as it is:
// transport.OpenSubscriber returns a transport.StatefulSubscriber, a
// Watermill subscriber that reports its listeners' states.
func ExampleHandler_AddSource() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := transport.OpenSubscriber(ctx, "mem://example-health?concurrency=4&max_attempts=3")
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	h, err := health.NewHandler(health.Config{})
	if err != nil {
		panic(err)
	}
	if err := h.AddSource("orders", sub); err != nil {
		panic(err)
	}

	if _, err := sub.Subscribe(ctx, "orders.created"); err != nil {
		panic(err)
	}
	// Ready once the listener's first receive has returned.
	ready := func() bool { return h.Report(ctx).Ready }
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); !ready() && time.Now().Before(deadline); {
		<-tick.C
	}
	r := h.Report(ctx)
	fmt.Println(r.Ready, r.Listeners[0].Source, r.Listeners[0].Name, r.Listeners[0].Reason)
	// Output:
	// true orders orders.created ok
}
