// Package console serves Berth's web console, standalone (berth console)
// or mounted in a service: the queues of one deployment
// with their counts and a day of history, and its dead letters to browse,
// replay and delete, as server-rendered pages and a small JSON API. It
// works on any Source (internal/inspect's SQL and SQS inspectors).
//
// # Pages and API
//
// /queues lists every queue (pending, in flight, delayed, dead-lettered,
// oldest pending age, drain rate), sortable and filterable by name;
// /queues/{name} adds the history chart. /deadletters browses dead letters
// by queue, reason and failure time in keyset pages; /deadletters/{id}
// shows one (body as text, JSON or hex, capped at PreviewLimit). Actions
// are POST forms that ask for confirmation, then redirect with the counts.
// The API mirrors them: GET /api/queues, /api/queues/{name},
// /api/deadletters, /api/deadletters/{id}; POST
// /api/deadletters/{replay,delete} with {"ids": […]} or {"all": true,
// "filter": {…}}.
//
// With a FleetSource (inspect.SQL), /fleet lists the listeners that
// subscribers with a FleetInterval report to the listeners table, with the
// age of each report (stale past StaleIntervals of its interval) and badges
// for faulted (with the fault and since when), latched and paused; GET
// /api/fleet is its API. With Config.HealthURLs, on any transport (on SQS
// the only way), /fleet also lists every listener of the services behind
// those health endpoints (health.Handler reports), read on demand at most
// once per HealthCacheTTL; an endpoint that gives no report is a row marked
// unreachable. The queue page and list pause and resume a queue
// fleet-wide (POST /queues/{name}/{pause,resume} with confirmation; POST
// /api/queues/{name}/{pause,resume}). With a GroupSource (inspect.SQL),
// /groups lists every topic's consumer groups (counts, oldest age, last
// reader; GET /api/groups[?topic=]) and retires one (POST /groups/retire
// with confirmation; POST /api/groups/retire), refused with 409 while its
// queue holds messages or a live listener reads it, unless forced. Bad input is 400 (a NUL byte or
// invalid UTF-8 in a field, an id the Source cannot have issued, anything
// after a JSON body), an unknown queue or dead letter 404, an action on a
// read-only console 403; every message is one line of text. A failure of
// the Source is 503 when its database does not answer a ping ("cannot
// see", never "nothing there"), else 500; neither body carries the
// error's text, which goes to the Logger.
//
// # Safety
//
// Replay and delete go through the Source's fenced statements
// (inspect.SQL claims each row with DELETE … RETURNING in the transaction
// that re-inserts it), so an action cut short moves nothing it did not
// delete, and two operators acting at once never move a dead letter twice:
// the second is told how many were already gone.
//
// # Authentication
//
// Auth holds a bearer token and/or a basic-auth user and password; with
// neither, CheckListen refuses any address that is not loopback, and every
// request whose Host is not a loopback IP, localhost or the connection's
// own address is refused with 421 (DNS rebinding). Writes from another
// site's pages are refused (Sec-Fetch-Site, else an Origin of another
// scheme or host), since a browser sends basic credentials with any site's
// form. The Authorization scheme is case-insensitive.
//
// # Embedding
//
// A service mounts Handler under Config.Prefix behind its own middleware
// (Example_mount); Open gives it a Source for a transport URL, and
// AllowedHosts names the Hosts it is reached by. GET <prefix>/healthz
// answers 200 while the Source's database answers, else 503, without
// credentials and without details. berth console uses the same API.
//
// # Goroutines
//
// Start starts one sampler goroutine that reads the queues' counts every
// SampleInterval into an in-memory window and, on SQL, one sample a
// minute into the database (read-write consoles; every console reads it
// at its first sample), so a restart keeps the last day; Close stops it
// and waits. The pages poll the API for live counts: the server holds no
// connection open.
package console
