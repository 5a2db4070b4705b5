// Package sqlqueuetest is the behaviour kit every SQL dialect of package
// sqlqueue runs: the engine's guarantees (the lease gate, release on
// close, recovery of a killed instance, dead-letter rows, exactly-once
// claims under competition, bad rows written by other tools, commit order,
// subscribing next to open writers, bad URLs, stray rows the sweeper
// dead-letters) checked against a real
// database. Package transporttest checks what every transport promises; this
// kit checks what only a queue table can get wrong. A dialect's test hands
// Run a Harness: a few hooks where databases differ (how to open a fresh
// database, write a bind parameter, insert a raw row, kill a pool's
// sessions). Everything else is the kit's own, dialect-neutral SQL.
//
// # Using it
//
//	func TestBehaviours(t *testing.T) {
//		sqlqueuetest.Run(t, sqlqueuetest.Harness{
//			Dialect:     mydialect.Dialect{},
//			Open:        openFreshSchema, // skips t when the server is absent
//			Placeholder: func(n int) string { return "$" + strconv.Itoa(n) },
//			InsertRaw:   insertRaw,
//			URL:         func(*testing.T) string { return "mydb://h/db" },
//			Kill:        killSessions,
//		})
//	}
//
//	func FuzzURL(f *testing.F) { sqlqueuetest.FuzzURL(f, sqlqueuetest.URLFuzz{ ... }) }
//
// # Cases
//
// Run runs each case as a parallel subtest named as below, on a database of
// its own from Harness.Open:
//
//   - LeaseLostNeverReachesUserCode: a claimed row taken over by another
//     owner fails Begin and Complete with transport.ErrLeaseLost.
//   - ReleaseReturnsAllWithAttemptsUnchanged: one statement releases ten
//     prefetched rows to pending without counting an attempt.
//   - CloseReleasesPrefetched: closing a subscriber with a full buffer
//     leaves no fetched or processing row, and counts no attempt for them.
//   - DeadLetterRowCarriesEverything: the error row has the uuid, headers,
//     body, attempts, reason and queue; the row leaves the queue; a second
//     dead-letter is transport.ErrLeaseLost.
//   - SweeperRecoversKilledInstance: an instance whose sessions are killed
//     (Harness.Kill) with fetched and processing rows; another instance's
//     sweeper recovers all of them, the processing ones at attempt 2.
//   - TwentyCompetingSubscribersExactlyOnce: 2,000 messages, 20
//     subscribers on one pool, each message delivered exactly once.
//   - CorruptHeadersDeadLetteredAndLoopContinues: a row whose headers are
//     not JSON is dead-lettered with them as they were; the next row is
//     delivered.
//   - OversizeRejectedNamingLimit: Publish over MaxMessageSize is
//     transport.ErrMessageTooLarge naming the limit.
//   - BadURLParameterNamesItself: a misspelt or invalid URL parameter is
//     transport.ErrInvalidConfig naming it, every problem at once.
//   - CommitOrderSafety: a row whose insert commits after a later row was
//     consumed is still delivered (claims are by state, not a high-water
//     mark).
//   - BadInput: rows written by hand (headers that are not a JSON object of
//     strings, odd bodies, an empty uuid, Harness.BadRows) are each handled
//     or dead-lettered with a reason, and the loop keeps going.
//   - SubscribeToExistingQueueTakesNoTableLock: a subscriber starts on an
//     existing queue, and gets its message, while another transaction holds
//     an uncommitted insert into the queue table. The check is by
//     behaviour, so it needs no lock views: a table lock that conflicts with
//     a writer's (PostgreSQL's SHARE lock of CREATE INDEX, SQL Server's Sch-M
//     or S) would wait for the open transaction and the case's 10-second
//     deadline fails it.
//   - SweepDeadLettersStrayRows: rows written by hand that no statement
//     would touch again (fetched or processing with no lease, or with no
//     owner and a lease an hour ahead; state 7 with no lease, a lease ahead
//     or one passed; Harness.StrayStates and Harness.StrayLeases) are moved
//     to the error table by one sweep, each with its reason ("stray row:
//     state 1 with no lease", "stray row: state 7 is not a known state");
//     the pending row, the claimed row and a processing row with its lease
//     stay as they were; Stats.Stray and Stats.DeadLettered count them, and
//     a second sweep finds none. The rows carry an owner and a lease
//     relative to the database's clock (RawRow.Owner, RawRow.Lease), which
//     Harness.InsertRaw writes.
//   - ParkedReachLaterGroups: 30 messages published to a topic with no
//     subscription are parked (Stats.Parked); a consumer group subscribing
//     later receives all 30, a second group later still too, then a default
//     reader drains them; the next publish parks nothing.
//   - RegistrationRacesPublishes: two groups register, through the
//     publisher's pool and through a second pool, at random moments of 500
//     publishes with no subscriptions cache; each message reaches exactly
//     the groups the semantics say (parked ones every group, later ones
//     each group registered before, none twice), and none is parked after
//     a registration returned.
//   - DeclaredGroupsReceiveBeforeSubscribing: PublisherConfig.Groups (per
//     topic and "*") registers the groups at the first publish; they
//     receive it with no subscriber started before.
//   - ParkedPrunedPastRetention: a group's source prunes its topic's parked
//     rows past ParkedRetention (never with the default or a negative
//     retention, never with a default reader); a group registering after
//     the prune gets none.
//
// # Opting out
//
// A harness leaves a case out only for what its database cannot do, and
// the case says why when it skips:
//
//   - SingleWriter (SQLite): the database runs one write transaction at a
//     time. CommitOrderSafety and SubscribeToExistingQueueTakesNoTableLock
//     hold a write transaction open while others write; there, the first
//     interleaving cannot happen (a later insert cannot commit before an
//     earlier open one) and every statement of the second waits for the
//     open transaction by design.
//   - Kill nil (SQLite): there are no server sessions to kill, one
//     connection per database is shared by the whole process.
//     SweeperRecoversKilledInstance still runs with the instance abandoned
//     instead (never closed, its rows fetched and processing until after
//     the check): recovery is driven by leases, not by sessions ending.
//   - URL nil: BadURLParameterNamesItself skips.
//   - StrayStates: SweepDeadLettersStrayRows writes only the unknown states
//     the harness lists besides 7, since the state column's type decides
//     what it can hold: SQL Server's tinyint holds no negative state, so
//     its harness lists 255 where PostgreSQL's lists -1 (and SQLite's -1
//     and a text state).
//
// # Fuzzing URLs
//
// FuzzURL is the shared body of each dialect's FuzzURL target: arbitrary
// inputs become URLs of the dialect; the functions under test never panic,
// and every error they return wraps transport.ErrInvalidConfig and does not
// repeat the URL's password.
package sqlqueuetest
