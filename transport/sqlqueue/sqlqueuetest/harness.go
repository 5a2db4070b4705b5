package sqlqueuetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/sqlqueue"
)

// Harness is one dialect's hooks into the kit: what differs between
// databases. Required fields are marked; Validate reports every missing one.
type Harness struct {
	// Dialect is the dialect under test. Required.
	Dialect sqlqueue.Dialect

	// Open creates a fresh, isolated database for one case (a schema on a
	// shared server, a file) and removes it at t's cleanup. When the
	// database is unavailable it skips t (or fails it, under CI). Required.
	Open func(t *testing.T) Env

	// Placeholder returns the n-th (from 1) bind parameter of the dialect's
	// SQL: "$1" (PostgreSQL), "?" (SQLite), "@p1" (SQL Server). Required.
	Placeholder func(n int) string

	// InsertRaw returns a statement inserting r into q's table as plain SQL
	// from another tool would: r's values bound as they are (r.State is
	// never nil here), owner and lease_until as RawRow documents, the other
	// columns at values that make the row due now. Required.
	InsertRaw func(q sqlqueue.Queue, r RawRow) sqlqueue.Stmt

	// URL returns a URL of the dialect's scheme that
	// BadURLParameterNamesItself adds bad parameters to. It is only
	// parsed, never connected to. Nil skips that case.
	URL func(t *testing.T) string

	// Kill terminates, from db, every server session of the pools opened
	// with Env.Pool(t, n, app) (PostgreSQL: pg_terminate_backend by
	// application_name; SQL Server: KILL by program_name), and fails t if
	// there is none. Nil when the database has no sessions to kill
	// (SQLite): SweeperRecoversKilledInstance then abandons the instance
	// instead (see the package documentation, Opting out).
	Kill func(t *testing.T, db *sql.DB, app string)

	// SingleWriter reports that the database runs one write transaction at
	// a time (SQLite): the cases that hold a write transaction open while
	// others write skip (see the package documentation, Opting out).
	SingleWriter bool

	// BadRows are rows that only this database can hold (SQLite: BLOB or
	// INTEGER headers, a TEXT body), inserted by BadInput with the kit's
	// own.
	BadRows []BadRow

	// StrayStates are more states outside 0, 1 and 2 that the state column
	// can hold, besides the 7 that SweepDeadLettersStrayRows always writes:
	// the case writes a row in each, once with no lease and once with a
	// lease an hour ahead, and expects both dead-lettered as of an unknown
	// state. PostgreSQL: -1; SQLite: -1 and a text state; SQL Server's
	// tinyint holds no negative: 255. Nil adds none.
	StrayStates []any

	// StrayLeases are lease_until values the column holds that are not
	// times (SQLite: text); a processing row with one is stray.
	StrayLeases []any
}

// Env is one fresh, isolated database opened by Harness.Open.
type Env struct {
	// Tables locates the engine's tables in the database (its schema,
	// when the harness isolates cases by schema).
	Tables sqlqueue.Tables

	// Pool opens a pool of at most conns connections on the database,
	// closed at t's cleanup. With app set, the pool's sessions carry that
	// name (PostgreSQL application_name, SQL Server "app name") for
	// Harness.Kill to find. A dialect with one process-wide pool per
	// database (SQLite) returns that pool and ignores conns and app.
	Pool func(t *testing.T, conns int, app string) *sql.DB
}

// RawRow is a queue table row as plain SQL writes it, bypassing the
// publisher. Headers, Body and State are bound as they are (a string,
// []byte or integer), so a harness may hold what the publisher never
// writes.
type RawRow struct {
	UUID    string
	Headers any
	Body    any
	// State is the state column; nil is sqlqueue.StatePending (0), filled
	// in by the kit before InsertRaw sees the row. An integer, or what only
	// a lax column holds (SQLite: text).
	State any
	// Owner is the owner column; 0 is NULL, as on a row nobody claimed.
	Owner int64
	// Lease sets lease_until to the database's now plus Lease, in whole
	// milliseconds (negative: already passed); 0 is NULL. The database's now is the clock the
	// dialect compares leases with: PostgreSQL now(), SQL Server
	// SYSUTCDATETIME(), SQLite the process clock in Unix milliseconds.
	Lease time.Duration
}

// BadRow is a row written by hand, as another tool (or a bug, or a disk)
// might leave it, and what the subscriber must do with it.
type BadRow struct {
	RawRow
	// Dead: the row must be dead-lettered with a reason, never handled.
	// Otherwise it must be handled.
	Dead bool
	// Payload is the payload a handled row must arrive with; nil does not
	// check it.
	Payload []byte
}

// Validate reports every required hook that h lacks, or nil.
func (h Harness) Validate() error {
	var errs []error
	if h.Dialect == nil {
		errs = append(errs, errors.New("Dialect: required"))
	}
	if h.Open == nil {
		errs = append(errs, errors.New("Open: required"))
	}
	if h.Placeholder == nil {
		errs = append(errs, errors.New("Placeholder: required"))
	}
	if h.InsertRaw == nil {
		errs = append(errs, errors.New("InsertRaw: required"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("sqlqueuetest: Harness: %w", errors.Join(errs...))
	}
	return nil
}

// cases are the kit's cases, in the order Run starts them.
var cases = []struct {
	name string
	run  func(t *testing.T, h Harness)
}{
	{"LeaseLostNeverReachesUserCode", testLeaseLost},
	{"ReleaseReturnsAllWithAttemptsUnchanged", testRelease},
	{"CloseReleasesPrefetched", testCloseReleasesPrefetched},
	{"DeadLetterRowCarriesEverything", testDeadLetterRow},
	{"AttemptErrorsKept", testAttemptErrorsKept},
	{"SweeperRecoversKilledInstance", testKilledInstance},
	{"TwentyCompetingSubscribersExactlyOnce", testCompeting},
	{"CorruptHeadersDeadLetteredAndLoopContinues", testCorruptHeaders},
	{"OversizeRejectedNamingLimit", testOversize},
	{"BadURLParameterNamesItself", testBadURL},
	{"CommitOrderSafety", testCommitOrder},
	{"BadInput", testBadInput},
	{"SubscribeToExistingQueueTakesNoTableLock", testSubscribeWhileWriting},
	{"SweepDeadLettersStrayRows", testSweepStray},
	{"SweeperSurvivesPanickingLogger", testSweeperPanickingLogger},
	{"OrderedPerKeyAcrossInstances", testOrderedLedger},
	{"OrderedClaimTakesOnlyHeads", testOrderedClaim},
	{"KeyClaimTakesHeads", testKeyClaimTakesHeads},
	{"HotKeysHandedOff", testHotKeysHandedOff},
	{"WaitingHeadPromoted", testWaitingHeadPromoted},
	{"DelayedKeyedRowReady", testDelayedKeyedRowReady},
	{"CloseReleasesFreedKeys", testCloseReleasesFreedKeys},
	{"OrderingKeyTooLongNamesLimit", testOrderingKeyTooLong},
	{"DirectClaimCountsAttemptOnce", testDirectClaim},
	{"DirectClaimReleasedOnClose", testDirectClose},
	{"DirectClaimRecoveredAsProcessing", testDirectRecovered},
	{"AcksRideClaims", testAcksRideClaims},
	{"ParkedReachLaterGroups", testParkedForLaterGroups},
	{"RegistrationRacesPublishes", testRegistrationRace},
	{"DeclaredGroupsReceiveBeforeSubscribing", testDeclaredGroups},
	{"ParkedPrunedPastRetention", testPruneParked},
	{"AcksRideSubscriber", testAcksRideSubscriber},
	{"HandlerTxCommitsWithAck", testHandlerTx},
	{"PublisherRecreatesDroppedQueue", testPublisherRecreatesDroppedQueue},
}

// Run runs every case as a parallel subtest, each on a database of its own.
func Run(t *testing.T, h Harness) {
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
}

// fixture is one case's database: the harness, its Env and the error
// table's name.
type fixture struct {
	h      Harness
	env    Env
	errors string // quoted, qualified error table
}

func (h Harness) open(t *testing.T) *fixture {
	t.Helper()
	env := h.Open(t)
	return &fixture{h: h, env: env, errors: sqlqueue.NamesFor(h.Dialect, env.Tables).Errors}
}

// pool opens an unnamed pool of conns connections.
func (f *fixture) pool(t *testing.T, conns int) *sql.DB {
	t.Helper()
	return f.env.Pool(t, conns, "")
}

// ph is the n-th bind parameter.
func (f *fixture) ph(n int) string { return f.h.Placeholder(n) }

// execer runs a statement on a pool or in a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// insert writes r into q's table with the harness's InsertRaw.
func (f *fixture) insert(t *testing.T, ex execer, q sqlqueue.Queue, r RawRow) {
	t.Helper()
	if r.State == nil {
		r.State = sqlqueue.StatePending
	}
	st := f.h.InsertRaw(q, r)
	if _, err := ex.ExecContext(context.Background(), st.SQL, st.Args...); err != nil {
		t.Fatalf("insert %q: %v", r.UUID, err)
	}
}
