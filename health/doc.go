// Package health reports whether Berth's listeners are working, for
// Kubernetes probes, load balancers and dashboards.
//
// It reads point-in-time snapshots (transport.ListenerState) from one or
// more sources (each subscriber), maps every listener's state to a verdict
// with a total, documented mapping, and serves the result as JSON. It reports
// state; it never logs it, and it changes nothing.
//
// # Endpoints
//
// A Handler serves three endpoints, matched on the last path element so it
// can be mounted under any prefix:
//
//   - /livez answers 503 only when a listener has been faulted for longer
//     than Config.FaultGrace: the watchdog could not rebuild it, and a
//     restart is the remaining cure. It calls no Pinger, so a broker
//     outage never restarts the process.
//   - /readyz answers 503 when any listener is not ready or any Pinger
//     failed.
//   - /healthz answers 503 when the overall health is Unhealthy, 200 when
//     it is Healthy or Degraded.
//
// All three serve the same Report JSON (docs/operations.md documents it field
// by field).
//
// # Mapping
//
// Each listener gets a Status (Healthy, Degraded, Unhealthy), a Reason, and
// a liveness and a readiness verdict. The first matching rule wins:
//
//	rule                                                    reason             health     live  ready
//	faulted (flag, status or loop)                          faulted            unhealthy  yes   no
//	  … for longer than FaultGrace (not paused)             fault_not_rebuilt  unhealthy  no    no
//	queue or table missing                                  queue_missing      unhealthy  yes   no
//	accepting or too busy, broker silent for Unreachable    broker_unreachable unhealthy  yes   no
//	  while its calls fail or go unanswered
//	stopped, never started, within StartupGrace             starting           degraded   yes   no
//	stopped                                                 stopped            unhealthy  yes   no
//	paused                                                  paused             degraded   yes   no
//	too busy (back-pressure latched)                        too_busy           degraded   yes   yes
//	accepting, failures ≥ MaxConsecutiveFailures            receive_failing    degraded   yes   no
//	accepting, never received, within StartupGrace          starting           degraded   yes   no
//	accepting, never received, after StartupGrace           not_receiving      unhealthy  yes   no
//	accepting, last receive older than StaleReceive         receive_stalled    unhealthy  yes   no
//	accepting, some consecutive failures                    receive_errors     degraded   yes   yes
//	accepting                                               ok                 healthy    yes   yes
//	any other status                                        unknown_status     unhealthy  yes   no
//
// A source whose ListenerStates panics is reported as one state_unavailable
// entry (unhealthy, live, not ready); a failed or timed-out ping is
// ping_failed (unhealthy; fails readiness, never liveness).
//
// The choices behind it:
//
//   - A fault fails readiness at once and liveness only after FaultGrace:
//     the watchdog rebuilds a faulted receiver within one check interval,
//     and only a process that cannot heal itself should be restarted. A
//     paused listener that faulted stays live: a restart would undo the
//     pause.
//   - Too busy is back-pressure doing its job: the process is working at
//     capacity. It is degraded but ready, so a rollout under load does not
//     stall and the pod is not taken out of service for being busy.
//   - Paused and stopped listeners are alive but not ready: they consume
//     nothing. A missing queue is unhealthy with its own reason; a restart
//     cannot create it, so liveness holds.
//   - The startup grace runs from the listener's StartedAt (from the
//     Handler's creation for a listener not started yet).
//
// Overall health is the worst verdict of all listeners and pings; the
// process is live when every listener is, ready when every listener is and
// every ping succeeded. With no listeners at all, it is healthy.
//
// # Sources and pingers
//
// A Source is anything with ListenerStates: a subscriber opened by URL
// (transport.OpenSubscriber returns a transport.StatefulSubscriber), any
// transport's subscriber, or a batching.Subscriber over one. Register each
// subscriber under a name with Handler.AddSource. A Pinger
// checks broker connectivity: PingFunc(db.PingContext) for a SQL database, a
// GetQueueAttributes call for an SQS queue. Pingers run concurrently on
// /readyz and /healthz, each bounded by Config.PingTimeout.
//
// # github.com/alexliesenfeld/health
//
// Services already built on that library add Berth with one check:
// Check(name, subscriber) fails when a listener is not ready. A Handler's
// ReadyCheck and LiveCheck do the same with its Config, sources and pingers.
package health
