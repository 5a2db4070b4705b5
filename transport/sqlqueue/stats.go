package sqlqueue

import "sync/atomic"

// Counters counts database round trips by kind, and rows by outcome. A
// Subscriber or Publisher owns one; all its sources add to it. Read it with
// Snapshot.
type Counters struct {
	claims, emptyClaims, claimedRows             atomic.Int64
	startedRows                                  atomic.Int64
	skippedClaims                                atomic.Int64
	begins, completes, renews, retries, releases atomic.Int64
	deadLetters, inserts, sweeps, txs, other     atomic.Int64
	leaseLost, recovered, deadLettered, expired  atomic.Int64
	published, stray, statementRetries           atomic.Int64
	probes, probeHits, skippedSweeps             atomic.Int64
	riddenAcks, analyzes, keyClaims              atomic.Int64
	parked, pruned                               atomic.Int64
}

// Stats is a snapshot of Counters. Round-trip fields count statements sent
// to the database (a transaction's BEGIN and COMMIT count under Tx). On
// PostgreSQL pools that pipeline a BEGIN with the first statement and a
// handler's COMMIT with its settlement (postgres.Connector), those share
// a round trip, so there Tx counts statements, more than round trips.
type Stats struct {
	Claims      int64 // claim statements
	EmptyClaims int64 // claim statements that returned no row
	ClaimedRows int64 // rows claimed
	// StartedRows counts the claimed rows that went straight into
	// processing (claimed for a free permit: no Begin of their own).
	StartedRows int64
	// SkippedClaims counts claims answered empty without a round trip (not
	// in Claims): the previous claim came back short and no wake-up
	// arrived since.
	SkippedClaims int64
	// KeyClaims counts the claim statements (in Claims) that looked only
	// for the next rows of ordering keys this subscriber settled (the
	// hand-off, see KeyClaimer).
	KeyClaims int64
	Begins    int64 // lease-gate statements (group-committed)
	Completes int64 // ack statements (group-committed)
	// RiddenAcks counts acks carried by a claim statement (no Complete
	// statement of their own; see SubscriberConfig.AckHold).
	RiddenAcks  int64
	Renews      int64 // lease renewal statements
	Retries     int64 // nack statements
	Releases    int64 // release statements
	DeadLetters int64 // dead-letter statements
	Inserts     int64 // publish statements
	Sweeps      int64 // sweeper statements (including its lock)
	Tx          int64 // BEGIN and COMMIT/ROLLBACK round trips
	Other       int64 // schema, subscription and statistics statements
	// Analyzes counts the ANALYZEs of queue tables this subscriber ran
	// because they had no planner statistics, or none for their present
	// size (StatsDialect); their statements count under Other.
	Analyzes int64

	LeaseLost    int64 // settlements refused because the fence did not match
	Recovered    int64 // rows the sweeper returned to pending
	DeadLettered int64 // rows moved to the error table (by settlement or sweep)
	// Stray counts rows the sweeper moved to the error table because no
	// statement would ever touch them (a fetched or processing row without
	// a lease, an unknown state); they count in DeadLettered too.
	Stray     int64
	Expired   int64 // rows dropped past their time-to-live
	Published int64 // rows inserted
	// Parked counts the messages a publisher parked: published to a topic
	// with no subscription at all, they wait in its default queue for the
	// consumer groups registered later (see the package documentation,
	// Consumer groups). They count in Published too.
	Parked int64
	// Pruned counts the parked messages a consumer group's sweep deleted
	// from its topic's default queue, older than ParkedRetention.
	Pruned int64

	// StatementRetries counts operations run again after a transient
	// database error (a deadlock victim, a lock timeout, a lost
	// connection), once per new run; the new run's statements also count
	// under their kind above. Not to be confused with Retries, the nack
	// statements.
	StatementRetries int64

	// Probes counts the idle probes (MultiProbe statements) run by the
	// pool's prober for this subscriber's queues and others of the same
	// pool: the prober is shared, and counts into the Counters of the
	// subscriber that started it.
	Probes int64
	// ProbeHits counts queues a probe found due rows in (each woke one
	// source).
	ProbeHits int64
	// SkippedSweeps counts sweeps not run because the queue was idle and
	// the pool's last probe saw its table empty.
	SkippedSweeps int64
}

// RoundTrips is the total of every round-trip field.
func (s Stats) RoundTrips() int64 {
	return s.Claims + s.Begins + s.Completes + s.Renews + s.Retries + s.Releases +
		s.DeadLetters + s.Inserts + s.Sweeps + s.Tx + s.Other + s.Probes
}

// Snapshot returns the current counts.
func (c *Counters) Snapshot() Stats {
	return Stats{
		Claims: c.claims.Load(), EmptyClaims: c.emptyClaims.Load(), ClaimedRows: c.claimedRows.Load(),
		SkippedClaims: c.skippedClaims.Load(), KeyClaims: c.keyClaims.Load(), StartedRows: c.startedRows.Load(),
		Begins: c.begins.Load(), Completes: c.completes.Load(), RiddenAcks: c.riddenAcks.Load(), Renews: c.renews.Load(),
		Retries: c.retries.Load(), Releases: c.releases.Load(), DeadLetters: c.deadLetters.Load(),
		Inserts: c.inserts.Load(), Sweeps: c.sweeps.Load(), Tx: c.txs.Load(), Other: c.other.Load(),
		LeaseLost: c.leaseLost.Load(), Recovered: c.recovered.Load(), DeadLettered: c.deadLettered.Load(),
		Stray: c.stray.Load(), Expired: c.expired.Load(), Published: c.published.Load(),
		StatementRetries: c.statementRetries.Load(), Analyzes: c.analyzes.Load(),
		Probes: c.probes.Load(), ProbeHits: c.probeHits.Load(), SkippedSweeps: c.skippedSweeps.Load(),
		Parked: c.parked.Load(), Pruned: c.pruned.Load(),
	}
}
