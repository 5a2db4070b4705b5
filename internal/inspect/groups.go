package inspect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The bases of a LastReader: what its time is read from.
const (
	// ReadByFleet: the latest report of a listener of the group's queue
	// in the fleet's listeners table (subscribers with fleet_interval).
	ReadByFleet = "fleet"
	// ReadByLease: the latest lease end of a message in flight: a reader
	// received it less than one lease before.
	ReadByLease = "lease"
	// ReadByDeadLetter: the latest dead letter of the queue: a reader
	// settled a message then (or a sweep of its subscriber expired one).
	ReadByDeadLetter = "dead letter"
	// ReadNever: the queue still holds every message it ever received, none
	// in flight, none ever attempted, none dead-lettered, and no listener
	// reports: no message of the group was ever handled.
	ReadNever = "never"
	// ReadUnknown: no evidence either way (messages may have been read and
	// deleted by a reader that does not report to the fleet table).
	ReadUnknown = "unknown"
)

// LastReader says when a consumer group was last read, and on what
// evidence (Basis, one of the Read… constants).
type LastReader struct {
	Basis string
	// At is when the evidence was left; zero for ReadNever and
	// ReadUnknown.
	At time.Time `json:",omitzero"`
	// Instance is the reporting subscriber (host/pid/random) of a fleet
	// report.
	Instance string `json:",omitempty"`
	// Live is true when a listener of the group reported within three of
	// its intervals (the fleet's staleness rule): a reader runs now.
	Live bool
}

// Group is one consumer group of a topic: a row of the subscriptions
// table, which publishers fan out to, and its queue table.
type Group struct {
	Topic string
	Group string // "" for the topic's default reader
	Queue string // the queue table
	// Registered is when the group registered (the subscription's
	// created_at).
	Registered time.Time `json:",omitzero"`
	// Ready, Delayed and InFlight count the queue's messages by state (see
	// QueueStats); from GroupsUpTo each stops at its cap, and ReadyMore,
	// DelayedMore and InFlightMore say where (the queue has more).
	Ready, Delayed, InFlight             int64
	ReadyMore, DelayedMore, InFlightMore bool `json:",omitempty"`
	// OldestAge is the age of the queue's oldest message (its lowest id's
	// created_at); 0 when the queue is empty.
	OldestAge time.Duration
	// Missing is true when the group is registered but its table does not
	// exist.
	Missing bool `json:",omitempty"`
	// Stray is true when the subscription names a queue table that is not
	// its (topic, group)'s: a publisher whose cached queue table was
	// dropped made it again and registered it under group "" (see
	// RetireOptions.Grace).
	Stray      bool `json:",omitempty"`
	LastReader LastReader
}

// Messages is the group's message count, every state.
func (g Group) Messages() int64 { return g.Ready + g.Delayed + g.InFlight }

// GroupList is Groups' answer.
type GroupList struct {
	Groups []Group
	// Reporting counts the listeners in the fleet's listeners table (every
	// queue): 0 when no subscriber runs with fleet_interval, so no
	// LastReader can be ReadByFleet.
	Reporting int
}

// Groups lists the consumer groups of topic, or of every topic when topic
// is "", by topic then group: each group's queue counts, the age of its
// oldest message and its last reader. The default reader of a topic (group
// "") is listed too, as publishers fan out to it alike.
func (s *SQL) Groups(ctx context.Context, topic string) (GroupList, error) {
	return s.groups(ctx, topic, 0)
}

// GroupsUpTo is Groups with each count stopped at max (see QueuesUpTo):
// the console's list of every group.
func (s *SQL) GroupsUpTo(ctx context.Context, topic string, max int64) (GroupList, error) {
	return s.groups(ctx, topic, max)
}

// groups is Groups, counting up to upTo rows per state when upTo > 0.
func (s *SQL) groups(ctx context.Context, topic string, upTo int64) (GroupList, error) {
	subs, err := s.subscriptionRows(ctx, topic)
	if err != nil {
		return GroupList{}, err
	}
	tables, err := s.queueTables(ctx)
	if err != nil {
		return GroupList{}, err
	}
	existing := map[string]bool{}
	for _, t := range tables {
		existing[t] = true
	}
	ls, now, err := s.groupListeners(ctx)
	if err != nil {
		return GroupList{}, err
	}
	out := GroupList{Groups: make([]Group, len(subs)), Reporting: len(ls)}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(countParallel)
	for i, sub := range subs {
		gr := &out.Groups[i]
		*gr = Group{Topic: sub.q.Topic, Group: sub.q.Group, Queue: sub.q.Name, Registered: sub.created, Missing: !existing[sub.q.Name], Stray: sub.stray}
		g.Go(func() error {
			if err := s.describeGroup(gctx, sub.q, gr, ls, now, upTo); err != nil {
				return fmt.Errorf("group %q of topic %q: %w", sub.q.Group, sub.q.Topic, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return GroupList{}, err
	}
	return out, nil
}

// subscription is one row of the subscriptions table.
type subscription struct {
	q       sqlqueue.Queue
	created time.Time
	stray   bool // queue_table is not the (topic, group)'s
}

// subscriptionRows reads the subscriptions of topic ("" for all), by
// topic and group. A missing table is none.
func (s *SQL) subscriptionRows(ctx context.Context, topic string) ([]subscription, error) {
	query := `SELECT topic, consumer_group, queue_table, created_at FROM ` + s.Names.Subscriptions
	var args []any
	if topic != "" {
		query += ` WHERE topic = ` + s.ph(1)
		args = append(args, topic)
	}
	rows, err := s.DB.QueryContext(ctx, query+` ORDER BY topic, consumer_group`, args...)
	if err != nil {
		if s.tableMissing(ctx, s.Names.SubscriptionsName, err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read subscriptions: %w", err)
	}
	defer rows.Close()
	var out []subscription
	for rows.Next() {
		var (
			t, g, table string
			created     any
		)
		if err := rows.Scan(&t, &g, &table, &created); err != nil {
			return nil, err
		}
		q := sqlqueue.QueueFor(s.Dialect, s.Tables, t, g)
		stray := q.Name != table
		if stray {
			q = s.queueByName(table)
			q.Topic, q.Group = t, g
		}
		out = append(out, subscription{q: q, created: toTime(created), stray: stray})
	}
	return out, rows.Err()
}

// groupListeners reads the fleet's listeners and the database's clock;
// none for a dialect without fleet tables.
func (s *SQL) groupListeners(ctx context.Context) ([]Listener, time.Time, error) {
	ls, now, err := s.Listeners(ctx)
	if errors.Is(err, sqlqueue.ErrFleetUnsupported) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read the fleet's listeners: %w", err)
	}
	return ls, now, nil
}

// liveReaders returns the listeners of queue that reported within three
// of their intervals by the database's clock now.
func liveReaders(ls []Listener, queue string, now time.Time) []Listener {
	var out []Listener
	for _, l := range ls {
		if l.Queue == queue && live(l, now) {
			out = append(out, l)
		}
	}
	return out
}

func live(l Listener, now time.Time) bool {
	return l.Interval > 0 && !now.IsZero() && now.Sub(l.UpdatedAt) <= 3*l.Interval
}

// describeGroup fills g's counts, OldestAge and LastReader (g.Missing
// set: only the fleet's reports count).
func (s *SQL) describeGroup(ctx context.Context, q sqlqueue.Queue, g *Group, ls []Listener, now time.Time, upTo int64) error {
	var cands []LastReader
	for _, l := range ls {
		if l.Queue == q.Name {
			cands = append(cands, LastReader{Basis: ReadByFleet, At: l.UpdatedAt, Instance: l.Instance, Live: live(l, now)})
		}
	}
	if g.Missing {
		g.LastReader = latest(cands)
		return nil
	}
	var st QueueStats
	if err := s.countQueue(ctx, q, &st, upTo); err != nil {
		return err
	}
	g.Ready, g.Delayed, g.InFlight = st.Ready, st.Delayed, st.InFlight
	g.ReadyMore, g.DelayedMore, g.InFlightMore = st.ReadyMore, st.DelayedMore, st.InFlightMore
	ev, err := s.evidence(ctx, q)
	if err != nil {
		return err
	}
	if !ev.oldest.IsZero() {
		g.OldestAge = max(s.now().Sub(ev.oldest), 0)
	}
	if !ev.lease.IsZero() {
		cands = append(cands, LastReader{Basis: ReadByLease, At: minTime(ev.lease, s.now())})
	}
	if !ev.failed.IsZero() {
		cands = append(cands, LastReader{Basis: ReadByDeadLetter, At: ev.failed})
	}
	g.LastReader = latest(cands)
	if len(cands) > 0 {
		return nil
	}
	// Nothing ever left the table: its lowest id is the first one and it
	// holds as many rows as ids were ever assigned (a gap, a rolled-back
	// insert, reads as unknown, never as never).
	if ev.minID == 1 && ev.lastID == g.Messages() && g.InFlight == 0 {
		attempted, err := s.attempted(ctx, q)
		if err != nil {
			return err
		}
		if !attempted {
			g.LastReader = LastReader{Basis: ReadNever}
		}
	}
	return nil
}

// latest returns the candidate with the latest At (a live one first), or
// ReadUnknown.
func latest(cands []LastReader) LastReader {
	best := LastReader{Basis: ReadUnknown}
	for _, c := range cands {
		if best.Basis == ReadUnknown || c.Live && !best.Live || c.Live == best.Live && c.At.After(best.At) {
			best = c
		}
	}
	return best
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// groupEvidence is what a queue table and the error table say of its
// readers: one statement of index probes.
type groupEvidence struct {
	minID, lastID int64     // lowest id held; highest id ever assigned
	oldest        time.Time // created_at of the lowest id
	lease         time.Time // latest lease end of a row in flight
	failed        time.Time // latest dead letter
}

func (s *SQL) evidence(ctx context.Context, q sqlqueue.Queue) (groupEvidence, error) {
	var query string
	args := []any{q.Name, q.Table}
	switch s.Kind {
	case "postgres":
		query = `SELECT
	(SELECT id FROM ` + q.Table + ` ORDER BY id LIMIT 1),
	(SELECT created_at FROM ` + q.Table + ` ORDER BY id LIMIT 1),
	(SELECT max(lease_until) FROM ` + q.Table + ` WHERE state <> 0),
	(SELECT max(failed_at) FROM ` + s.Names.Errors + ` WHERE queue_table = $1),
	pg_sequence_last_value(pg_get_serial_sequence($2, 'id')::regclass)`
	case "sqlserver":
		query = `SELECT
	(SELECT TOP (1) id FROM ` + q.Table + ` ORDER BY id),
	(SELECT TOP (1) created_at FROM ` + q.Table + ` ORDER BY id),
	(SELECT max(lease_until) FROM ` + q.Table + ` WHERE state <> 0),
	(SELECT max(failed_at) FROM ` + s.Names.Errors + ` WHERE queue_table = @p1),
	CAST(IDENT_CURRENT(@p2) AS bigint)`
	default:
		query = `SELECT
	(SELECT id FROM ` + q.Table + ` ORDER BY id LIMIT 1),
	(SELECT created_at FROM ` + q.Table + ` ORDER BY id LIMIT 1),
	(SELECT max(lease_until) FROM ` + q.Table + ` WHERE state <> 0),
	(SELECT max(failed_at) FROM ` + s.Names.Errors + ` WHERE queue_table = ?),
	(SELECT seq FROM sqlite_sequence WHERE name = ?)`
		args[1] = q.Name
	}
	var (
		ev                    groupEvidence
		minID, lastID         sql.NullInt64
		oldest, lease, failed any
	)
	if err := s.DB.QueryRowContext(ctx, query, args...).Scan(&minID, &oldest, &lease, &failed, &lastID); err != nil {
		return ev, fmt.Errorf("read %s's evidence of readers: %w", q.Name, err)
	}
	ev.minID, ev.lastID = minID.Int64, lastID.Int64
	if oldest != nil {
		ev.oldest = toTime(oldest)
	}
	if lease != nil {
		ev.lease = toTime(lease)
	}
	if failed != nil {
		ev.failed = toTime(failed)
	}
	return ev, nil
}

// attempted reports whether a row of q was ever begun (attempts > 0): a
// scan of the table when none was, which only a queue otherwise unread
// pays.
func (s *SQL) attempted(ctx context.Context, q sqlqueue.Queue) (bool, error) {
	query := `SELECT count(*) FROM (SELECT 1 AS x FROM ` + q.Table + ` WHERE attempts > 0 LIMIT 1) AS a`
	if s.Kind == "sqlserver" {
		query = `SELECT count(*) FROM (SELECT TOP (1) 1 AS x FROM ` + q.Table + ` WHERE attempts > 0) AS a`
	}
	var n int
	if err := s.DB.QueryRowContext(ctx, query).Scan(&n); err != nil {
		return false, fmt.Errorf("read %s's attempts: %w", q.Name, err)
	}
	return n > 0, nil
}

// ErrGroupNotEmpty is returned (as a *GroupNotEmptyError) by RetireGroup
// without Force for a group whose queue holds messages.
var ErrGroupNotEmpty = errors.New("consumer group has messages")

// ErrGroupInUse is returned (as a *GroupInUseError) by RetireGroup without
// Force for a group a listener in the fleet table reads.
var ErrGroupInUse = errors.New("consumer group has a live reader")

// GroupNotEmptyError says how many messages kept RetireGroup from
// retiring a group. errors.Is(err, ErrGroupNotEmpty) matches it.
type GroupNotEmptyError struct {
	Topic, Group, Queue      string
	Ready, Delayed, InFlight int64
	// Unregistered is true when the group was unregistered (by this or an
	// earlier retire) and only its table is kept.
	Unregistered bool
}

func (e *GroupNotEmptyError) Error() string {
	what := "nothing changed"
	if e.Unregistered {
		what = "it is unregistered, its table " + e.Queue + " is kept"
	}
	return fmt.Sprintf("%s: group %q of topic %q holds %d message(s) (%d ready, %d delayed, %d in flight); %s; retire with --force to drop them",
		ErrGroupNotEmpty, e.Group, e.Topic, e.Ready+e.Delayed+e.InFlight, e.Ready, e.Delayed, e.InFlight, what)
}

// Is matches ErrGroupNotEmpty.
func (e *GroupNotEmptyError) Is(target error) bool { return target == ErrGroupNotEmpty }

// GroupInUseError names the live readers that kept RetireGroup from
// retiring a group. errors.Is(err, ErrGroupInUse) matches it.
type GroupInUseError struct {
	Topic, Group string
	Readers      []Listener
}

func (e *GroupInUseError) Error() string {
	r := e.Readers[0]
	return fmt.Sprintf("%s: group %q of topic %q is read by %d listener(s), %s (%s) last reported %s; nothing changed; stop them first, or retire with --force (they register the group again)",
		ErrGroupInUse, e.Group, e.Topic, len(e.Readers), r.Instance, r.Name, r.UpdatedAt.UTC().Format(time.RFC3339))
}

// Is matches ErrGroupInUse.
func (e *GroupInUseError) Is(target error) bool { return target == ErrGroupInUse }

// DefaultRetireGrace is RetireOptions.Grace's default: twice the
// publishers' default SubscriptionsTTL.
const DefaultRetireGrace = 2 * sqlqueue.DefaultSubscriptionsTTL

// RetireOptions tunes RetireGroup. The zero value is the defaults.
type RetireOptions struct {
	// Force retires a group whose queue holds messages (they are dropped
	// with the table) or that a live listener reads. Defaults to false.
	Force bool
	// Grace is how long RetireGroup waits between unregistering the group
	// and dropping its table, so that every publisher that cached the
	// topic's subscriptions (PublisherConfig.SubscriptionsTTL, 1s by
	// default) reads them again before the table goes: a publisher whose
	// insert finds the table missing makes it again. Set it above the
	// longest subscriptions_ttl of the deployment's publishers. Defaults
	// to DefaultRetireGrace (2s); negative drops at once.
	Grace time.Duration
}

// Retired is what RetireGroup did.
type Retired struct {
	Topic, Group, Queue string
	// Unregistered is true when RetireGroup deleted the subscription (false
	// when an earlier retire had).
	Unregistered bool
	// Dropped is true when RetireGroup dropped the queue table (false when
	// there was none); DroppedMessages is how many messages went with it
	// (Force).
	Dropped         bool
	DroppedMessages int64
	// Waited is the grace RetireGroup waited after unregistering.
	Waited time.Duration
	// DeadLetters counts the group's dead letters, which stay in the error
	// table (berth dlq purge --queue <Queue>); DeadLettersMore says there
	// are more than DeadCountCap.
	DeadLetters     int64
	DeadLettersMore bool `json:",omitempty"`
	// Parking is true when the topic has no subscription left: its
	// further messages are parked in its default queue (see package
	// sqlqueue, Consumer groups).
	Parking bool
	// Reregistered is true when a subscription of the queue table was
	// found again after the drop: a subscriber of the group still runs, or
	// a publisher with a stale cache made the table again.
	Reregistered bool `json:",omitempty"`
}

// RetireGroup unregisters consumer group of topic, so that publishers stop
// fanning out to it, and drops its queue table. Without o.Force it refuses
// (a *GroupNotEmptyError) while the queue holds messages, and (a
// *GroupInUseError) while a listener of it reported to the fleet table
// within three of its intervals; nothing is changed then. It is
// idempotent: a group already retired is no error (Retired says nothing
// was done), and a run that stopped between the steps finishes them.
//
// The steps: the subscription is deleted under the topic's registration
// lock; RetireGroup waits o.Grace, while publishers that cached the
// group drop their caches; it then drops the table under the schema lock,
// unless messages arrived meanwhile and o.Force is not set (the table is
// kept: a *GroupNotEmptyError with Unregistered). Dead letters of the
// group stay in the error table; a pause of its queue is lifted.
//
// What RetireGroup cannot stop: a subscriber of the group that still runs
// (without fleet reporting it is not seen) registers the group again at
// its next claim, and a publisher with the group in its Groups
// (groups=topic:group) registers it again when it restarts.
func (s *SQL) RetireGroup(ctx context.Context, topic, group string, o RetireOptions) (Retired, error) {
	if group == "" {
		return Retired{}, fmt.Errorf("%w: retire needs a consumer group: the default reader of %q is no consumer group", transport.ErrInvalidConfig, topic)
	}
	if o.Grace == 0 {
		o.Grace = DefaultRetireGrace
	}
	r := Retired{Topic: topic, Group: group}
	subs, err := s.subscriptionRows(ctx, topic)
	if err != nil {
		return r, err
	}
	q := sqlqueue.QueueFor(s.Dialect, s.Tables, topic, group)
	registered := false
	for _, sub := range subs {
		if sub.q.Group == group {
			q, registered = sub.q, true
		}
	}
	r.Queue = q.Name
	st, err := s.groupStats(ctx, q)
	if err != nil {
		return r, err
	}
	r.DeadLetters, r.DeadLettersMore = st.DeadLettered, st.DeadLetteredMore
	if !o.Force {
		ls, now, err := s.groupListeners(ctx)
		if err != nil {
			return r, err
		}
		if lr := liveReaders(ls, q.Name, now); len(lr) > 0 {
			return r, &GroupInUseError{Topic: topic, Group: group, Readers: lr}
		}
		if n := st.Ready + st.Delayed + st.InFlight; n > 0 {
			return r, &GroupNotEmptyError{Topic: topic, Group: group, Queue: q.Name, Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight, Unregistered: !registered}
		}
	}
	if registered {
		left, err := s.unregister(ctx, q)
		if err != nil {
			return r, err
		}
		r.Unregistered, r.Parking = true, left == 0
		if o.Grace > 0 {
			t := time.NewTimer(o.Grace)
			select {
			case <-t.C:
				r.Waited = o.Grace
			case <-ctx.Done():
				t.Stop()
				return r, fmt.Errorf("retire %q of %q: unregistered, the table is kept: %w", group, topic, ctx.Err())
			}
		}
	} else {
		left, err := s.subscriptionRows(ctx, topic)
		if err != nil {
			return r, err
		}
		r.Parking = len(left) == 0
	}
	if st.Paused {
		if _, err := sqlqueue.ResumeQueue(ctx, s.DB, s.Dialect, s.Names, q.Name); err != nil {
			return r, fmt.Errorf("lift the pause of %s: %w", q.Name, err)
		}
	}
	if st.Missing {
		return r, s.checkReregistered(ctx, q, &r)
	}
	dropped, n, err := s.dropQueue(ctx, q, o.Force)
	if err != nil {
		return r, err
	}
	r.Dropped, r.DroppedMessages = dropped, n
	if !dropped && n > 0 {
		st, _ := s.groupStats(ctx, q)
		return r, &GroupNotEmptyError{Topic: topic, Group: group, Queue: q.Name, Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight, Unregistered: true}
	}
	return r, s.checkReregistered(ctx, q, &r)
}

// groupStats counts q's messages, dead letters and pause; Missing when it
// has no table. A queue unknown in every way is Missing with no counts.
func (s *SQL) groupStats(ctx context.Context, q sqlqueue.Queue) (QueueStats, error) {
	st, err := s.Queue(ctx, q.Name)
	if errors.Is(err, transport.ErrQueueNotFound) {
		return QueueStats{Queue: q.Name, Missing: true}, nil
	}
	return st, err
}

// unregister deletes q's subscription under the topic's registration lock
// (the one registrations and parked publishes take) and returns how many
// subscriptions the topic has left.
func (s *SQL) unregister(ctx context.Context, q sqlqueue.Queue) (left int, err error) {
	lockKey := s.Tables.Schema + "." + s.Tables.Prefix + "topic:" + q.Topic
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.exec(ctx, tx, s.Dialect.Lock(lockKey, true)); err != nil {
			return fmt.Errorf("topic lock: %w", err)
		}
		del := `DELETE FROM ` + s.Names.Subscriptions + ` WHERE topic = ` + s.ph(1) + ` AND consumer_group = ` + s.ph(2)
		if _, err := tx.ExecContext(ctx, del, q.Topic, q.Group); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT count(*) FROM `+s.Names.Subscriptions+` WHERE topic = `+s.ph(1), q.Topic).Scan(&left)
	})
	if err != nil {
		return 0, fmt.Errorf("unregister group %q of topic %q: %w", q.Group, q.Topic, err)
	}
	return left, nil
}

// dropQueue drops q's table under the schema lock, unless it holds
// messages and not force; it returns whether it dropped it and the
// messages it held.
func (s *SQL) dropQueue(ctx context.Context, q sqlqueue.Queue, force bool) (dropped bool, n int64, err error) {
	lockKey := s.Tables.Schema + "." + s.Tables.Prefix + "schema"
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.exec(ctx, tx, s.Dialect.Lock(lockKey, true)); err != nil {
			return fmt.Errorf("schema lock: %w", err)
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+q.Table).Scan(&n); err != nil {
			return err
		}
		if n > 0 && !force {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+q.Table); err != nil {
			return err
		}
		if s.Kind == "sqlite" { // ids of a table made again start at 1
			if _, err := tx.ExecContext(ctx, `DELETE FROM sqlite_sequence WHERE name = ?`, q.Name); err != nil {
				return err
			}
		}
		dropped = true
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("drop %s: %w", q.Name, err)
	}
	return dropped, n, nil
}

// checkReregistered sets r.Reregistered when a subscription names q's
// table again.
func (s *SQL) checkReregistered(ctx context.Context, q sqlqueue.Queue, r *Retired) error {
	var n int
	err := s.DB.QueryRowContext(ctx, `SELECT count(*) FROM `+s.Names.Subscriptions+` WHERE queue_table = `+s.ph(1), q.Name).Scan(&n)
	if err != nil {
		if s.tableMissing(ctx, s.Names.SubscriptionsName, err) {
			return nil
		}
		return fmt.Errorf("read subscriptions of %s: %w", q.Name, err)
	}
	r.Reregistered = n > 0
	return nil
}
