package chaos

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/health"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqs"
)

// Readiness bounds under an unreachable broker, with default settings (the
// ones docs/operations.md states): an idle consumer whose broker stops
// answering (a blackholed connection to PostgreSQL, a database that
// refuses and resets connections, a frozen SQS endpoint, one answering 503)
// is reported not ready, as broker_unreachable, within
// health.DefaultUnreachable (10s) of its last contact with the broker; once
// the broker answers again it is ready, and handles a new message, within
// about a second. The bounds asserted carry slack for a loaded CI machine;
// the times measured are logged.
func TestReadinessUnreachableBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the readiness bound")
	}
	for _, tc := range []struct {
		name  string
		fault func(px *TCPProxy, on bool)
	}{
		{"postgres_blackhole", (*TCPProxy).Stall},
		{"postgres_refused", (*TCPProxy).Refuse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, err := url.Parse(testenv.PostgresURL(t))
			if err != nil {
				t.Fatal(err)
			}
			px, err := NewTCPProxy(base.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			tables := sqlqueue.Tables{Schema: testenv.UniqueName("ready")}
			admin, err := postgres.Open(base.String(), 1)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			if _, err := admin.Exec(`CREATE SCHEMA ` + tables.Schema); err != nil {
				t.Fatal(err)
			}
			defer admin.Exec(`DROP SCHEMA ` + tables.Schema + ` CASCADE`)
			proxied := *base
			proxied.Host = px.Addr()
			sub, err := postgres.NewSubscriber(sqlqueue.SubscriberConfig{Tables: tables, DSN: proxied.String()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			pub, err := postgres.NewPublisher(postgres.PublisherConfig{Tables: tables, DSN: base.String()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			checkReadiness(t, sub, pub, func(on bool) { tc.fault(px, on) })
		})
	}
	for _, tc := range []struct {
		name  string
		fault HTTPFault
	}{
		{"sqs_frozen", HTTPFreeze},
		{"sqs_unavailable", HTTP5xx},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			endpoint := testenv.SQSEndpoint(t)
			px, err := NewHTTPProxy(endpoint, func() float64 { return 0 })
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			b := newSQS(&Config{URL: endpoint}, testenv.UniqueName("ready"))
			q := sqs.QueueConfig{Create: true}
			sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{Client: b.client(px.URL()), Queue: q}, nil)
			if err != nil {
				t.Fatal(err)
			}
			pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: b.client(endpoint), Queue: q}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			checkReadiness(t, sub, pub, func(on bool) {
				if on {
					px.Set(tc.fault, 1, 0)
				} else {
					px.Set(HTTPOK, 0, 0)
				}
			})
		})
	}
}

// checkReadiness consumes one message to warm up, idles, breaks the
// broker's link with fault(true), waits for readiness to fail, heals it,
// and waits for readiness and for a new message to be handled.
func checkReadiness(t *testing.T, sub transport.StatefulSubscriber, pub message.Publisher, fault func(bool)) {
	t.Helper()
	topic := testenv.UniqueName("ready")
	h, err := health.NewHandler(health.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddSource("sub", sub); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			handled <- string(m.Payload)
			m.Ack()
		}
	}()
	defer func() {
		cancel()
		_ = sub.Close()
		<-done
	}()
	publish := func(body string) {
		t.Helper()
		if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(body))); err != nil {
			t.Fatal(err)
		}
	}
	report := func() health.Report { return h.Report(context.Background()) }
	waitHandled := func(body string, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := time.After(within)
		for {
			select {
			case got := <-handled:
				if got == body {
					return time.Since(start)
				}
			case <-deadline:
				t.Fatalf("%q not handled within %s: %+v", body, within, report().Listeners)
			}
		}
	}
	waitReady := func(want bool, within time.Duration) (time.Duration, health.Report) {
		t.Helper()
		start := time.Now()
		for {
			r := report()
			if r.Ready == want {
				return time.Since(start), r
			}
			if time.Since(start) > within {
				t.Fatalf("ready=%v not reached within %s: %+v", want, within, r.Listeners)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	publish("warm-up")
	waitHandled("warm-up", 30*time.Second)
	waitReady(true, 30*time.Second)
	// Idle for a while: an idle SQL source parks and claims without a
	// round trip, so only pings and probes reach the database.
	time.Sleep(3 * time.Second)

	fault(true)
	faultAt := time.Now()
	red, r := waitReady(false, 30*time.Second)
	l := r.Listeners[0]
	// A broker that refuses or answers errors fails the claims, and
	// receive_failing may come first; one that does not answer at all can
	// only be broker_unreachable.
	if l.Reason != health.ReasonUnreachable && l.Reason != health.ReasonReceiveFailing {
		t.Fatalf("reason %q, want %q or %q (%+v)", l.Reason, health.ReasonUnreachable, health.ReasonReceiveFailing, l)
	}
	silent := faultAt.Add(red).Sub(l.LastContact)
	t.Logf("not ready (%s) %s after the fault began, %s after the broker's last answer", l.Reason, red.Round(time.Millisecond), silent.Round(time.Millisecond))
	// The bound: Unreachable after the broker's last answer (a call in
	// flight when the fault began, an SQS long poll, may still be
	// answered). 1.5s of slack for the probe period and a loaded machine.
	if bound := health.DefaultUnreachable + 1500*time.Millisecond; silent > bound {
		t.Errorf("not ready only %s after the broker's last answer; the bound is %s", silent, health.DefaultUnreachable)
	}
	// The listener must stay unready while the fault lasts (no flapping
	// back to ready on a stale record).
	for range 10 {
		if report().Ready {
			t.Fatal("ready again while the broker is still unreachable")
		}
		time.Sleep(100 * time.Millisecond)
	}

	fault(false)
	green, _ := waitReady(true, 15*time.Second)
	publish("after")
	took := waitHandled("after", 15*time.Second)
	t.Logf("ready %s after the heal; a message published then handled in %s", green.Round(time.Millisecond), took.Round(time.Millisecond))
	if green > 3*time.Second {
		t.Errorf("ready only %s after the heal", green)
	}
}
