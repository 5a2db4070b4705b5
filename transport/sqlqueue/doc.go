// Package sqlqueue is the dialect-neutral engine of Berth's SQL queue
// transports (PostgreSQL, SQLite, SQL Server): schema creation, the
// transport.Source with its lease gate, the sweeper, the publisher, and the
// subscriber built on the shared pipeline. Dialect packages supply a
// Dialect (all of a database's SQL in one place), passed to the
// constructors (NewSubscriber(d, cfg, logger)), and their process-wide
// pools (PoolOpener, used when a config's DB is nil); their configs are
// this package's (type SubscriberConfig = sqlqueue.SubscriberConfig), so
// a literal is two deep at most:
//
//	postgres.SubscriberConfig{DSN: dsn, Lease: time.Minute, Pipeline: receiver.Config{Concurrency: 64}}
//
// # Tables
//
// One table per queue, a queue being a (topic, consumer group) pair (see
// QueueTableName), plus three shared tables: subscriptions, errors
// (dead letters) and the schema version. Shared tables are versioned
// (Dialect.Migrations) and created idempotently under a cluster-wide lock,
// so many instances may start at once; DDL prints the whole script for DBAs
// who apply schema by hand (then set Tables.ManualSchema).
//
// # Row life cycle
//
// pending → fetched (Claim: one set-based statement, a fresh owner token per
// claim, rows locked by concurrent claims skipped) → processing (Begin, the
// lease gate: attempts+1 and a lease, only if still owned and fetched;
// otherwise transport.ErrLeaseLost and user code never runs) → deleted
// (Complete). Retry returns a row to pending with a due time; Release
// returns prefetched rows to pending without counting an attempt;
// DeadLetter moves a row to the error table with the reason. Every
// follow-up statement is fenced by owner token and expected state.
// Concurrent Begin, Complete and Retry calls are group-committed
// (internal/coalesce): one statement per batch, no added latency when
// idle.
//
// # Recovery
//
// Each source runs a sweeper on a jittered interval; a zero-wait cluster
// lock makes one instance per queue do the work, in one transaction: stray
// rows (a fetched or processing state without a lease or an owner, or an
// unknown state, as another tool or a bad migration may leave them: no other
// statement would ever deliver, recover or dead-letter them) go to the
// error table with a reason naming their state (Stats.Stray); rows whose
// fetch timeout or processing lease expired go back to pending (attempts
// unchanged), or to the error table when the expired attempt was the last;
// rows past their time-to-live are dropped and counted. Delayed rows need no separate job:
// due_at is part of the claim predicate and of the pending index.
//
// # Ordering keys
//
// A message with metadata transport.MetadataOrderingKey is stored with its
// key in the ordering_key column. The claim takes a keyed row only when no
// row of the same key has a lower id, whatever that row's state: the head
// of a key (pending, delayed, retrying, fetched or processing) blocks its
// later rows until it is completed or dead-lettered. So every instance of
// a consumer group holds at most one row per key at a time, in id order,
// with no coordination beyond the claim statement; Recover, Release and
// Retry keep a row's id, so it stays its key's head. Each dialect's Claim
// documents why the check is exact under concurrency (PostgreSQL's
// inserts also lock each key, so a key's ids are in commit order). Settling
// a keyed row wakes the pool's sources of its queue. See docs/ordering.md.
//
// # Statement retries
//
// A dialect implementing TransientClassifier tells transient database
// errors apart: a deadlock victim, a lock timeout, a serialization
// failure, a database failing over or throttling, a lost connection. The
// engine runs the failed operation again, up to three more times, after
// 10, 20 and 40 ms (each jittered to between half and all of it, and cut
// short when the operation's context ends), counts each new run in
// Stats.StatementRetries and logs the operation once, when it ends, at
// Info. A dialect that also implements OutageClassifier tells outages
// apart (a database failing over, throttling, short of resources: seconds
// to a minute): after one, the settlements and publish inserts wait 1 s,
// then twice as long each time up to 10 s (jittered alike), and run again
// until their context ends — StatementTimeout (30 s by default) for a
// settlement — or, for Publish, whose context has no deadline (it drops the
// message context's), for one minute of waiting; so an ack in flight
// during a fail-over lands instead of being redelivered at lease expiry,
// and a Publish returns the error only once the outage outlasts that. Claims,
// sweeps and schema work give up after three runs as for any error, and
// come back through their own loops. What runs again, and after which
// errors:
//
//   - The fenced follow-ups (Begin, Complete, Renew, Retry, Release,
//     DeadLetter), after any transient error. Fenced on owner token and
//     state, a second run touches none of the rows a first run committed
//     before its reply was lost; those rows read as transport.ErrLeaseLost,
//     and no row is settled twice.
//   - Claims, after any transient error. A claim rolled back claimed
//     nothing; one whose reply was lost leaves its rows fetched under an
//     owner token nobody holds, and the sweeper returns them to pending
//     after the fetch timeout, attempts unchanged.
//   - Sweeps, after any transient error, as a whole transaction.
//   - Publish inserts, only after an error that guarantees they did not
//     commit (TransientClassifier.NotCommitted: a deadlock victim, a lock
//     timeout, a login refused during a fail-over, a statement never
//     sent). After a connection lost mid-statement the insert may have
//     committed, and running it again could publish every message twice:
//     Publish returns the error. Inserts in the caller's transaction
//     (WithTx) never run again.
//
// Operations of several statements run in one transaction and run again
// whole, never from the statement that failed.
//
// # Publishing
//
// One multi-row INSERT per Publish call and queue; publishing a topic
// inserts one row per subscribed consumer group in the same transaction; a
// topic with no subscription yet keeps its messages in its default queue.
// The publisher caches each topic's subscriptions for
// PublisherConfig.SubscriptionsTTL (1s), so a Publish to a topic with one
// queue is one round trip; a subscription recorded in this process
// invalidates the cache at once, one recorded by another process is seen
// within the TTL. Publisher.WithTx binds a publisher to the caller's
// transaction (outbox). Metadata MetadataDelay / MetadataDeliverAt, or
// Watermill's delay metadata (components/delay: delay.Message,
// delay.NewPublisher), or PublisherConfig.Delay delay a message, to the
// millisecond; Berth's keys win over Watermill's, and a malformed value
// fails Publish with transport.ErrInvalidMessage naming the key.
// PublisherConfig.TTL expires a message.
//
// # Consumer groups
//
// A consumer group registers at its first Subscribe or
// SubscribeInitialize, at a publisher that declares it
// (PublisherConfig.Groups), or through RegisterGroup (berth migrate
// --queue topic:group). Its initial position is every parked message the
// topic still retains, then every message published after its
// registration. A message published to a topic with no subscription at
// all (no group, no default reader: a Subscribe without a group, recorded
// as group "") is parked in the topic's default queue (Stats.Parked; the
// publisher logs the topic's first). A group's first registration copies
// the parked rows into its queue (pending, attempts 0); they stay in the
// default queue for later groups until a default reader consumes them or
// they are older than SubscriberConfig.ParkedRetention, when the groups'
// sweeps prune them (Source.PruneParked, Stats.Pruned). Registration takes
// a per-topic lock exclusively (ParkingDialect), and a publish that found
// no subscription takes it shared, reads the subscriptions again and
// inserts where that read says: nothing is parked after a registration
// committed. Topics with subscriptions publish as before, one statement.
// A registration in another process is seen by a publisher after at most
// SubscriptionsTTL; declare groups ahead to close that window.
// docs/consumer-groups.md has the whole story.
//
// # Wake-up
//
// Local publishers wake local subscribers of the same pool and table
// in-process. Dialects implementing Notifier (PostgreSQL LISTEN/NOTIFY) also
// wake subscribers in other processes, over one dedicated connection per
// pool; a NotifyCoalescer's publisher sends at most one notification per
// queue per PublisherConfig.NotifyWindow, the last of a burst trailing
// after the burst's inserts committed. Wake-ups are debounced and elected: one of a (pool, queue)
// that had none within SubscriberConfig.WakeDebounce (25ms) fires at once,
// the ones that follow within that window coalesce into one at its end,
// delivered
// to one idle source (round robin) rather than to every source, so a
// NOTIFY does not send every idle subscriber of a process to an empty
// claim. Across pools, each queue has one leader (WakeSession; PostgreSQL:
// a session advisory lock on the LISTEN connection): only the leader
// listens and answers, the other pools find rows by their idle probe (see
// Idle), and the lead rotates about every 30s, passes on when the leader's
// sources stop claiming, and is taken over within a few seconds when the
// leader dies. A pool's election pass is one round trip for all its
// queues (LeadFunc), and queues taken in one pass keep one term. A source
// whose previous claim came back short does not ask the database again
// until a wake-up arrives (Stats.SkippedClaims). A wake-up hints the rows
// its notifications stood for, learnt from what earlier wake-ups found,
// and the loop asks for twice that: the claim comes back short and ends
// the wave (hint.go).
//
// # Acks on claims
//
// A dialect implementing AckRider (PostgreSQL, SQL Server) carries acks in
// the claim statement. While the flow is light (the source's last claim came back
// short or empty, and no row it fetched waits in the buffer), Complete
// waits up to SubscriberConfig.AckHold (50ms) for the source's next claim
// and goes with it: one statement and one transaction for a message's ack
// and the next messages' claim. It goes alone when no claim comes in time,
// and at once under load (then group-committed). Fenced as Complete is
// (Stats.RiddenAcks counts the acks carried; ride.go).
//
// # Planner statistics
//
// A dialect implementing StatsDialect (PostgreSQL) plans claims from the
// queue table's statistics, which a new table lacks until autovacuum's
// first visit. Without them a claim may sort the whole backlog. And a
// connection keeps the plans it made while the table was small, which read
// it whole, as a burst fills it. A source checks in the background after
// its first claim that comes back full, after a burst's first full claims
// (as their size grows), and at most once a minute otherwise, and analyzes
// a table that has no statistics or has grown well past the size they
// describe, once for all the instances that find it so together (the
// ANALYZE makes every connection plan again; Stats.Analyzes; analyze.go).
//
// # Idle
//
// A source of a Subscriber whose claim came back empty parks: its receive
// loop keeps its rhythm (the wave controller is unchanged: one probe after
// an empty delay), but Claim answers empty without a round trip
// (Stats.SkippedClaims) until a wake-up arrives. Dialects implementing
// MultiProber (all three) give each pool one prober, shared by every
// subscriber on the pool: one statement (Stats.Probes) checks every parked
// queue's pending index for a due row and the earliest future due time,
// and wakes the queues with due rows (Stats.ProbeHits) through the hub
// above. Its interval starts at the empty delay, doubles while it finds
// nothing, up to SubscriberConfig.IdleProbeMax (10s), and starts over on
// any wake-up, in-process publish, claim that found rows or probe that
// found a due row; it never waits past the earliest future due time, so
// delayed rows and backed-off retries are delivered on time. A row that
// reaches an idle queue without a wake-up reaching the pool (a publisher
// in another process without NOTIFY, an outbox transaction committed by
// another client, a notification lost while leadership changed hands) is
// claimed within IdleProbeMax plus the debounce. An idle pool therefore
// costs one statement per IdleProbeMax, whatever its number of queues,
// plus (PostgreSQL) its share of the election, one round trip per pass.
// The sweeper of a parked source skips its run (Stats.SkippedSweeps) when
// a recent probe saw the queue table empty (no row in any state: nothing
// to recover, dead-letter or expire); otherwise it runs as before.
//
// # Round trips
//
// Stats counts statements by kind (claims, begins, completes, …) so
// benchmarks and metrics can report round trips per message.
//
// # Fleet
//
// A subscriber with SubscriberConfig.FleetInterval (URL: fleet_interval=5s)
// runs one more goroutine, which it owns: every interval it reads the
// paused table (<prefix>paused: one row per queue table paused
// fleet-wide) and pauses its listeners of paused queues — each releases
// its prefetched rows and stops claiming, in-flight messages finish — and
// resumes those it paused whose queue no longer is; then it writes one row
// per listener to the listeners table (<prefix>listeners, keyed by
// instance and listener name): status, loop state, wave, buffered, in
// flight, batch pending, latched, fault and since when, rebuilds, last
// receive. So a pause (PauseQueue; berth pause; the console) reaches every
// reporting process within one interval, and so does a resume. A listener
// already paused by its own code (Listener.Pause) is left alone, and not
// resumed with the queue.
//
// The cost is one statement per listener per interval (an upsert: INSERT …
// ON CONFLICT DO UPDATE on PostgreSQL and SQLite, UPDATE then INSERT when
// it touched no row in one T-SQL batch on SQL Server) plus one read of the
// paused table per subscriber per interval, and once in a hundred
// intervals one delete of rows not updated for ten of their intervals (a
// crashed process's); Subscriber.FleetStats counts them. Close stops the
// goroutine, waits for it, and deletes the subscriber's rows. A failing
// write or read is logged (the first, then at most one a minute) and tried
// again at the next interval; it never stops or pauses a listener. The
// tables are created (under the schema lock) at the first report unless
// Tables.ManualSchema (then create them once with EnsureFleet, or let the
// first PauseQueue do it); times are Unix milliseconds, updated_at by the
// database's clock (see FleetDialect). Dialects opt in by implementing
// FleetDialect; PostgreSQL, SQLite and SQL Server do. A pipeline built by
// hand (receiver.NewSubscriber over NewSource) reports through
// NewFleetReporter and ReceiverMember.
package sqlqueue
