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

	"github.com/berth-go/berth/transport/sqlqueue"
)

// flowCounts is what a flow of messages cost on the fake TDS server:
// requests by statement kind (see kind), and the messages.
type flowCounts struct {
	messages int
	kinds    map[string]int
	started  int64 // rows claimed straight into processing (Stats)
	ridden   int64 // acks carried by claims (Stats)
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
	claims := c.kinds[kindClaim] + c.kinds[kindClaimDirect] + c.kinds[kindClaimComplete]
	return fmt.Sprintf("%d messages: %.2f statements per message (claims %.2f, of which direct %.2f and carrying acks %.2f; begins %.2f; completes %.2f; releases %.2f); %d rows started, %d acks ridden",
		c.messages, c.per(c.consuming()), c.per(claims), c.per(c.kinds[kindClaimDirect]), c.per(c.kinds[kindClaimComplete]),
		c.per(c.kinds[kindBegin]), c.per(c.kinds[kindComplete]), c.per(c.kinds[kindRelease]+c.kinds[kindReleaseDirect]),
		c.started, c.ridden)
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
	f, db := openFake(t)
	q := &fakeQueue{name: "berth_q_orders__billing"}
	f.AnswerCall(q.answer)
	tables := sqlqueue.Tables{ManualSchema: true}
	pub, err := sqlqueue.NewPublisher(Dialect{}, sqlqueue.PublisherConfig{DB: db, Tables: tables}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	cfg := sqlqueue.SubscriberConfig{DB: db, Tables: tables, ConsumerGroup: "billing", SweepInterval: -1}
	cfg.Pipeline.Concurrency = 16
	cfg.AckHold = ackHold
	sub, err := sqlqueue.NewSubscriber(Dialect{}, cfg, watermill.NopLogger{})
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
	if !steady {
		ms := make([]*message.Message, n)
		for i := range ms {
			ms[i] = message.NewMessage(strconv.Itoa(i), []byte("x"))
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
	for i := range n {
		if steady {
			publish(message.NewMessage(strconv.Itoa(i), []byte("x")))
		}
		select {
		case m := <-ch:
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d of %d not delivered", i, n)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for q.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left undeleted", q.Len())
		}
		time.Sleep(5 * time.Millisecond) // polling the fake's state, not synchronising with it
	}
	c := flowCounts{messages: n, kinds: map[string]int{}}
	for _, text := range f.Log()[start:] {
		c.kinds[kind(text)]++
	}
	st := sub.Stats()
	c.started, c.ridden = st.StartedRows, st.RiddenAcks
	cancel()
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

// The claims the engine sends as ClaimDirect and ClaimComplete keep every
// property of Claim's batch (TestClaimTakesNoRangeLocksAndYields): no
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
	for _, st := range []string{
		d.ClaimDirect(q, 1, 10, 4, time.Minute, time.Second).SQL,
		d.ClaimComplete(q, 1, 10, 4, time.Minute, time.Second, testRefs).SQL,
	} {
		for _, bad := range []string{"HOLDLOCK", "SERIALIZABLE", "REPEATABLEREAD", "TABLOCK", "UPDLOCK"} {
			if strings.Contains(strings.ToUpper(st), bad) {
				t.Errorf("the batch takes %s:\n%s", bad, st)
			}
		}
		if !strings.HasPrefix(st, claimHead) {
			t.Errorf("the batch does not open as Claim's (DEADLOCK_PRIORITY LOW, READ COMMITTED):\n%s", st)
		}
		if !strings.Contains(st, pick) || !strings.Contains(st, take) {
			t.Errorf("the batch's pick or take is not Claim's:\n%s", st)
		}
		if strings.Index(st, "FROM "+q.Table+" AS p WITH") > strings.Index(st, "UPDATE q SET") {
			t.Errorf("the batch takes before it picks:\n%s", st)
		}
	}
}
