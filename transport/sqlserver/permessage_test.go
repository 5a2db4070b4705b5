package sqlserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// flowCounts is what a flow of messages cost on the fake TDS server:
// requests by statement kind (see kind), and the messages.
type flowCounts struct {
	messages int
	kinds    map[string]int
	started  int64 // rows claimed straight into processing (Stats)
	ridden   int64 // acks carried by claims (Stats)
	// claims and keyClaims are Stats.Claims and Stats.KeyClaims.
	claims, keyClaims int64
	// disorder counts the messages handled before an earlier message of
	// their ordering key.
	disorder int
	elapsed  time.Duration // from the subscription to the last message's delivery
}

// consuming is the statements a message's consumption costs: claims,
// lease gates, acks and releases (the publisher's inserts and the idle
// probes apart).
func (c flowCounts) consuming() int {
	n := 0
	for k, v := range c.kinds {
		if k != kindInsert && k != kindProbe && k != "" {
			n += v
		}
	}
	return n
}

func (c flowCounts) per(n int) float64 { return float64(n) / float64(c.messages) }

func (c flowCounts) String() string {
	claims := c.kinds[kindClaim] + c.kinds[kindClaimDirect] + c.kinds[kindClaimComplete] + c.kinds[kindClaimKeys] + c.kinds[kindKeysRiding]
	return fmt.Sprintf("%d messages: %.2f statements per message (claims %.2f, of which direct %.2f, carrying acks %.2f, by key %.2f of which carrying acks %.2f; begins %.2f; completes %.2f; releases %.2f); %d rows started, %d acks ridden",
		c.messages, c.per(c.consuming()), c.per(claims), c.per(c.kinds[kindClaimDirect]), c.per(c.kinds[kindClaimComplete]),
		c.per(c.kinds[kindClaimKeys]+c.kinds[kindKeysRiding]), c.per(c.kinds[kindKeysRiding]),
		c.per(c.kinds[kindBegin]), c.per(c.kinds[kindComplete]), c.per(c.kinds[kindRelease]+c.kinds[kindReleaseDirect]),
		c.started, c.ridden)
}

// flow is what runSpec runs: n messages, published one at a time
// (steady) or all first (a drain), with AckHold ackHold, message i of
// ordering key i % keys (none when keys is 0), consumed through dialect
// (Dialect{} when nil).
type flow struct {
	n       int
	steady  bool
	ackHold time.Duration
	keys    int
	dialect sqlqueue.Dialect
}

// runFlow runs a subscriber (Concurrency 16, acks at once) and a publisher
// on one pool over the fake TDS server and its fake queue, and counts the
// statements from the subscription to the last row's delete. steady
// publishes n messages one at a time, each once the previous one reached
// its handler (sql/steady's light flow: 400 msg/s over 12 instances of 256
// permits, every message finds free permits); otherwise n are published
// first and drained (sql/drain). ackHold is SubscriberConfig.AckHold.
func runFlow(t *testing.T, n int, steady bool, ackHold time.Duration) flowCounts {
	t.Helper()
	return runSpec(t, flow{n: n, steady: steady, ackHold: ackHold})
}

// runSpec is runFlow for any flow.
func runSpec(t *testing.T, fl flow) flowCounts {
	t.Helper()
	n, steady, d := fl.n, fl.steady, fl.dialect
	if d == nil {
		d = Dialect{}
	}
	f, db := openFake(t)
	q := &fakeQueue{name: "berth_q_orders__billing"}
	f.AnswerCall(q.answer)
	tables := sqlqueue.Tables{ManualSchema: true}
	pub, err := sqlqueue.NewPublisher(d, sqlqueue.PublisherConfig{DB: db, Tables: tables}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	cfg := sqlqueue.SubscriberConfig{DB: db, Tables: tables, ConsumerGroup: "billing", SweepInterval: -1}
	cfg.Pipeline.Concurrency = 16
	cfg.AckHold = fl.ackHold
	sub, err := sqlqueue.NewSubscriber(d, cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	publish := func(ms ...*message.Message) {
		t.Helper()
		if err := pub.Publish("orders", ms...); err != nil {
			t.Fatal(err)
		}
	}
	newMessage := func(i int) *message.Message {
		m := message.NewMessage(strconv.Itoa(i), []byte(strconv.Itoa(i)))
		if fl.keys > 0 {
			m.Metadata.Set(transport.MetadataOrderingKey, "k"+strconv.Itoa(i%fl.keys))
		}
		return m
	}
	if !steady {
		ms := make([]*message.Message, n)
		for i := range ms {
			ms[i] = newMessage(i)
		}
		publish(ms...)
	}
	start := len(f.Log())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	c := flowCounts{messages: n, kinds: map[string]int{}}
	began := time.Now()
	last := map[string]int{} // per ordering key, the last message handled
	for i := range n {
		if steady {
			publish(newMessage(i))
		}
		select {
		case m := <-ch:
			if k := m.Metadata.Get(transport.MetadataOrderingKey); k != "" {
				j, _ := strconv.Atoi(string(m.Payload))
				if prev, ok := last[k]; ok && j < prev {
					c.disorder++
				}
				last[k] = j
			}
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d of %d not delivered", i, n)
		}
	}
	c.elapsed = time.Since(began)
	deadline := time.Now().Add(10 * time.Second)
	for q.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left undeleted", q.Len())
		}
		time.Sleep(5 * time.Millisecond) // polling the fake's state, not synchronising with it
	}
	// The last claim deletes the last rows at the server before the
	// subscriber counts it: read the counts once it has closed.
	cancel()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for _, text := range f.Log()[start:] {
		c.kinds[kind(text)]++
	}
	st := sub.Stats()
	c.started, c.ridden = st.StartedRows, st.RiddenAcks
	c.claims, c.keyClaims = st.Claims, st.KeyClaims
	return c
}

// TestStatementsPerMessage counts what consuming a message costs in
// statements on the fake TDS server (issue 37 item 9): at light load
// (sql/steady: every message finds a free permit) a claim, a Begin and a
// Complete each before; now the claim starts the row itself (ClaimDirect,
// no Begin), and the ack rides on the next message's claim (ClaimComplete)
// when it comes within AckHold (with acks alone: a claim and a Complete).
// In a drain the rows claimed for free
// permits skip the lease gate; buffered rows still pass it.
func TestStatementsPerMessage(t *testing.T) {
	t.Run("steady", func(t *testing.T) {
		c := runFlow(t, 100, true, 0)
		t.Log(c)
		if c.kinds[kindBegin] != 0 {
			t.Errorf("%d Begin statements for %d messages that each found a free permit; want none (claimed straight into processing)", c.kinds[kindBegin], c.messages)
		}
		if c.started != int64(c.messages) {
			t.Errorf("%d rows started by their claim, want all %d", c.started, c.messages)
		}
		if c.ridden == 0 {
			t.Error("no ack rode on a claim")
		}
		// Before: 3 (claim, Begin, Complete); claim and ack alone: 2;
		// measured 1.03. (Loose: an ack whose next claim comes later than
		// AckHold goes alone.)
		if got := c.per(c.consuming()); got > 2.5 {
			t.Errorf("%.2f statements per message, want about 1", got)
		}
	})
	t.Run("steady_acks_alone", func(t *testing.T) {
		c := runFlow(t, 100, true, -1) // acks never wait for a claim
		t.Log(c)
		if c.kinds[kindBegin] != 0 || c.kinds[kindClaimComplete] != 0 {
			t.Errorf("%d Begin statements and %d claims carrying acks; want none", c.kinds[kindBegin], c.kinds[kindClaimComplete])
		}
		// A claim and a Complete per message, and the first claim.
		if got := c.per(c.consuming()); got > 2.5 {
			t.Errorf("%.2f statements per message, want 2", got)
		}
	})
	t.Run("drain", func(t *testing.T) {
		c := runFlow(t, 512, false, 0)
		t.Log(c)
		if c.started == 0 {
			t.Error("no row was claimed straight into processing")
		}
		if got := c.per(c.consuming()); got >= 2.5 {
			t.Errorf("%.2f statements per message, want fewer", got)
		}
	})
}

// The claims the engine sends as ClaimDirect, ClaimComplete and
// ClaimKeys keep every property of Claim's batch (TestClaimTakesNoRangeLocksAndYields): no
// range lock, DEADLOCK_PRIORITY LOW before the queue is read, READ
// COMMITTED, Claim's pick and take with their hints, the ordering key's
// probes.
func TestDirectClaimsKeepClaimsProperties(t *testing.T) {
	c := runFlow(t, 20, true, 0)
	if c.kinds[kindClaimDirect] == 0 || c.kinds[kindClaimComplete] == 0 {
		t.Fatalf("the flow sent no direct claim or no claim carrying acks: %v", c.kinds)
	}
	d := Dialect{}
	q := sqlqueue.QueueFor(d, sqlqueue.Tables{}, "orders", "billing")
	claim := d.Claim(q, 1, 10, time.Minute).SQL
	pick := claim[strings.Index(claim, "\nSELECT TOP (@p1) p.id")+1 : strings.Index(claim, "UPDATE q SET")]
	pick = pick[strings.Index(pick, "\n")+1:] // from FROM on: the columns differ
	take := claim[strings.Index(claim, "\nFROM "+q.Table+" AS q WITH"):strings.Index(claim, "SELECT id, uuid")]
	// The key probes: no row of the key with a lower id, none in flight.
	probes := claim[strings.Index(claim, "AND (p.ordering_key IS NULL OR (")+len("AND (p.ordering_key IS NULL OR (") : strings.Index(claim, "\nORDER BY p.due_at")]
	probes = strings.TrimSuffix(probes, ")")
	for _, st := range []string{
		d.ClaimDirect(q, 1, 10, 4, time.Minute, time.Second).SQL,
		d.ClaimComplete(q, 1, 10, 4, time.Minute, time.Second, testRefs).SQL,
		d.ClaimKeys(q, 1, []string{"a", "b"}, nil, 10, 4, time.Minute, time.Second, nil).SQL,
		d.ClaimKeys(q, 1, []string{"a", "b"}, nil, 10, 4, time.Minute, time.Second, testRefs).SQL,
	} {
		for _, bad := range []string{"HOLDLOCK", "SERIALIZABLE", "REPEATABLEREAD", "TABLOCK", "UPDLOCK"} {
			if strings.Contains(strings.ToUpper(st), bad) {
				t.Errorf("the batch takes %s:\n%s", bad, st)
			}
		}
		if !strings.HasPrefix(st, claimHead) {
			t.Errorf("the batch does not open as Claim's (DEADLOCK_PRIORITY LOW, READ COMMITTED):\n%s", st)
		}
		if strings.Contains(st, "FROM @keys AS k\n") {
			// ClaimKeys picks from the keys' heads, with Claim's probes.
			if !strings.Contains(st, probes) || !strings.Contains(st, take) {
				t.Errorf("the key claim's probes or take are not Claim's:\n%s", st)
			}
		} else if !strings.Contains(st, pick) || !strings.Contains(st, take) {
			t.Errorf("the batch's pick or take is not Claim's:\n%s", st)
		}
		if strings.Index(st, "FROM "+q.Table+" AS p WITH") > strings.Index(st, "UPDATE q SET") {
			t.Errorf("the batch takes before it picks:\n%s", st)
		}
	}
}

// dialectBeforeHandOff is every interface of Dialect that the engine
// looks for but sqlqueue.KeyClaimer.
type dialectBeforeHandOff interface {
	sqlqueue.Dialect
	sqlqueue.DirectDialect
	sqlqueue.AckRider
	sqlqueue.SessionChecker
	sqlqueue.MissingTableClassifier
	sqlqueue.Limiter
	sqlqueue.MultiProber
	sqlqueue.QueueMigrator
	sqlqueue.CallerTxDialect
	sqlqueue.SweepSplitter
	sqlqueue.ParkingDialect
	sqlqueue.FleetDialect
	sqlqueue.TransientClassifier
	sqlqueue.OutageClassifier
	sqlqueue.PoolOpener
}

// withoutHandOff is Dialect as it was before ClaimKeys: a settled key's
// next row waits for a full claim.
type withoutHandOff struct{ dialectBeforeHandOff }

// TestKeyClaimsHandOff drains ordered messages through a Subscriber on
// the fake TDS server (issue 39): every key's messages arrive in publish
// order, and with ten hot keys most claims are key claims (ClaimKeys over
// the keys whose head the listener settled, carrying the acks), where
// without the hand-off a settled head waits for a full claim. It logs
// claims and statements per message for the three workloads of
// sql/ordered (no key, 1,000 keys, 10 hot keys), with and without the
// hand-off.
func TestKeyClaimsHandOff(t *testing.T) {
	if _, ok := any(withoutHandOff{Dialect{}}).(sqlqueue.KeyClaimer); ok {
		t.Fatal("withoutHandOff claims by key")
	}
	const n = 1000
	for _, w := range []struct {
		name string
		keys int
	}{{"no_key", 0}, {"1000_keys", 1000}, {"10_hot_keys", 10}} {
		t.Run(w.name, func(t *testing.T) {
			before := runSpec(t, flow{n: n, keys: w.keys, dialect: withoutHandOff{Dialect{}}})
			after := runSpec(t, flow{n: n, keys: w.keys})
			for _, c := range []flowCounts{before, after} {
				if c.disorder > 0 {
					t.Errorf("%d messages handled before an earlier one of their key", c.disorder)
				}
			}
			t.Logf("without the hand-off: %d claims (%.2f per message), delivered in %v; %s", before.claims, before.per(int(before.claims)), before.elapsed.Round(time.Millisecond), before)
			t.Logf("with the hand-off: %d claims (%.2f per message), %d by key, delivered in %v; %s", after.claims, after.per(int(after.claims)), after.keyClaims, after.elapsed.Round(time.Millisecond), after)
			if before.keyClaims != 0 {
				t.Errorf("%d key claims without the hand-off", before.keyClaims)
			}
			if w.keys == 0 || w.keys >= n {
				return // no key waits behind another message of its own
			}
			if after.keyClaims < after.claims/2 {
				t.Errorf("%d of %d claims by key for %d hot keys; want most", after.keyClaims, after.claims, w.keys)
			}
			if got := after.kinds[kindClaimKeys] + after.kinds[kindKeysRiding]; int64(got) != after.keyClaims {
				t.Errorf("%d key claims reached the server, Stats.KeyClaims %d", got, after.keyClaims)
			}
		})
	}
}
