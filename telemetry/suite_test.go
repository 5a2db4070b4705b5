package telemetry_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/internal/subopt"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/transporttest"
)

// subscriber is what the suite needs of a transport's subscriber.
type subscriber interface {
	message.Subscriber
	transport.StateSource
}

// backend opens a transport's publisher and subscriber for the suite. The
// subscriber uses pcfg (with the Observer set) and consumes as group (when
// not empty); rt reports the transport's round trips. system is the
// messaging.system the transport names; consumers report the topic as
// destination unless destination maps it.
type backend struct {
	system      string
	group       string
	destination func(topic string) string
	open        func(t *testing.T, pcfg receiver.Config) (pub message.Publisher, sub subscriber, rt telemetry.RoundTripper)
}

// consumerDestination is the messaging.destination.name consumers of
// topic report.
func (b backend) consumerDestination(topic string) string {
	if b.destination != nil {
		return b.destination(topic)
	}
	return topic
}

// consumerAttrs are the attributes every consumer span and metric of topic
// carries: system, destination, and consumer group when there is one.
func (b backend) consumerAttrs(topic string) []attribute.KeyValue {
	kvs := []attribute.KeyValue{semconv.MessagingSystemKey.String(b.system),
		semconv.MessagingDestinationName(b.consumerDestination(topic))}
	if b.group != "" {
		kvs = append(kvs, semconv.MessagingConsumerGroupName(b.group))
	}
	return kvs
}

// runSuite runs every telemetry test over one transport. It must not run in
// parallel with other tests (fault injection is process-wide).
func runSuite(t *testing.T, b backend) {
	t.Run("TraceChild", func(t *testing.T) { testTrace(t, b, false) })
	t.Run("TraceLink", func(t *testing.T) { testTrace(t, b, true) })
	t.Run("BatchPublishAndBatchSpan", func(t *testing.T) { testBatch(t, b) })
	t.Run("BatchingConsume", func(t *testing.T) { testBatchingConsume(t, b) })
	t.Run("Metrics", func(t *testing.T) { testMetrics(t, b) })
}

func basePipeline() receiver.Config {
	var c receiver.Config
	c.Concurrency = 4
	c.RetryDelay = time.Millisecond
	c.MaxRetryDelay = 10 * time.Millisecond
	c.DrainTimeout = 5 * time.Second
	c.CheckInterval = 20 * time.Millisecond
	c.EmptyDelay = 20 * time.Millisecond
	return c
}

type stack struct {
	r   *rig
	cfg telemetry.Config
	obs *telemetry.Observer
	pub message.Publisher
	sub subscriber
	rt  telemetry.RoundTripper
	// faults injects faults into every listener's source.
	faults *transporttest.Faults
}

func openStack(t *testing.T, b backend, pcfg receiver.Config, mod func(*telemetry.Config)) *stack {
	t.Helper()
	r := newRig(t)
	cfg := r.config() // no System: the transport names it
	if mod != nil {
		mod(&cfg)
	}
	obs, err := telemetry.NewObserver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.Observer = obs
	rawPub, sub, rt := b.open(t, pcfg)
	s := &stack{r: r, cfg: cfg, obs: obs, pub: telemetry.Publisher(rawPub, cfg), sub: sub, rt: rt,
		faults: transporttest.NewFaults()}
	t.Cleanup(func() {
		_ = s.sub.Close()
		_ = s.pub.Close()
	})
	return s
}

func subscribe(t *testing.T, s *stack, topic string) <-chan *message.Message {
	t.Helper()
	if si, ok := s.sub.(message.SubscribeInitializer); ok {
		if err := si.SubscribeInitialize(topic); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(subopt.With(context.Background(), subopt.Options{
		WrapSource: func(src transport.Source) transport.Source { return transporttest.FaultySource(src, s.faults) },
	}))
	t.Cleanup(cancel)
	ch, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func processSpans(r *rig) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range r.spans.GetSpans() {
		if strings.HasPrefix(s.Name, "process ") && s.SpanKind == trace.SpanKindConsumer {
			if _, batch := attr(s, semconv.MessagingBatchMessageCountKey); !batch {
				out = append(out, s)
			}
		}
	}
	return out
}

// processSpanOf waits for the ended process span of message uuid.
func processSpanOf(t *testing.T, r *rig, uuid string) tracetest.SpanStub {
	t.Helper()
	var found tracetest.SpanStub
	eventually(t, "process span of "+uuid, func() bool {
		for _, s := range processSpans(r) {
			if v, ok := attr(s, semconv.MessagingMessageIDKey); ok && v.AsString() == uuid {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

func wantAttr(t *testing.T, s tracetest.SpanStub, kv attribute.KeyValue) {
	t.Helper()
	v, ok := attr(s, kv.Key)
	if !ok {
		t.Errorf("span %q: no attribute %s (want %s)", s.Name, kv.Key, kv.Value.String())
		return
	}
	if v != kv.Value {
		t.Errorf("span %q: %s = %s, want %s", s.Name, kv.Key, v.String(), kv.Value.String())
	}
}

// testTrace proves one trace spans publisher → broker → consumer: the send
// span is a child of the caller's span (msg.Context()), and the consumer's
// process span is the send span's child — or, with Config.Link, a new root
// linked to it.
func testTrace(t *testing.T, b backend, link bool) {
	s := openStack(t, b, basePipeline(), func(c *telemetry.Config) { c.Link = link })
	topic := uniqueTopic("trace")
	ch := subscribe(t, s, topic)

	ctx, request := s.r.tp.Tracer("test").Start(context.Background(), "request")
	msg := message.NewMessage(watermill.NewUUID(), []byte("hello"))
	msg.Metadata.Set("correlation_id", "corr-1")
	msg.SetContext(ctx)
	if err := s.pub.Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	request.End()

	got := receive(t, ch)
	if got.Metadata.Get("traceparent") == "" {
		t.Error("no traceparent in the delivered metadata")
	}
	if _, ok := transport.PublishedAt(got); !ok {
		t.Errorf("no %s in the delivered metadata", transport.MetadataPublishedAt)
	}
	consumerSC := trace.SpanContextFromContext(got.Context())
	if !consumerSC.IsValid() {
		t.Fatal("the message context carries no span")
	}
	got.Ack()

	send := s.r.span(t, "send "+topic)
	proc := processSpanOf(t, s.r, msg.UUID)
	req := s.r.span(t, "request")

	// Publisher side.
	if send.Parent.SpanID() != req.SpanContext.SpanID() || send.SpanContext.TraceID() != req.SpanContext.TraceID() {
		t.Errorf("send span's parent = %s, want the request span %s (msg.Context())", send.Parent.SpanID(), req.SpanContext.SpanID())
	}
	if send.SpanKind != trace.SpanKindProducer {
		t.Errorf("send span kind = %s, want producer", send.SpanKind)
	}
	wantAttr(t, send, semconv.MessagingSystemKey.String(b.system))
	wantAttr(t, send, semconv.MessagingDestinationName(topic))
	wantAttr(t, send, semconv.MessagingOperationTypeSend)
	wantAttr(t, send, semconv.MessagingOperationName("send"))
	wantAttr(t, send, semconv.MessagingMessageID(msg.UUID))
	wantAttr(t, send, semconv.MessagingMessageConversationID("corr-1"))

	// Consumer side.
	if proc.SpanContext.SpanID() != consumerSC.SpanID() {
		t.Errorf("the message context's span is %s, want the process span %s", consumerSC.SpanID(), proc.SpanContext.SpanID())
	}
	if proc.SpanKind != trace.SpanKindConsumer {
		t.Errorf("process span kind = %s, want consumer", proc.SpanKind)
	}
	if link {
		if proc.Parent.IsValid() {
			t.Errorf("linked process span has parent %s, want a new root", proc.Parent.SpanID())
		}
		if proc.SpanContext.TraceID() == send.SpanContext.TraceID() {
			t.Error("linked process span is in the producer's trace, want a new trace")
		}
		if len(proc.Links) != 1 || proc.Links[0].SpanContext.SpanID() != send.SpanContext.SpanID() ||
			proc.Links[0].SpanContext.TraceID() != send.SpanContext.TraceID() {
			t.Errorf("process span links = %+v, want one link to the send span %s", proc.Links, send.SpanContext.SpanID())
		}
	} else {
		if proc.SpanContext.TraceID() != req.SpanContext.TraceID() {
			t.Errorf("process span trace %s, want the publisher's %s", proc.SpanContext.TraceID(), req.SpanContext.TraceID())
		}
		if proc.Parent.SpanID() != send.SpanContext.SpanID() || !proc.Parent.IsRemote() {
			t.Errorf("process span parent = %s (remote %v), want the send span %s, remote",
				proc.Parent.SpanID(), proc.Parent.IsRemote(), send.SpanContext.SpanID())
		}
	}
	for _, kv := range b.consumerAttrs(topic) {
		wantAttr(t, proc, kv)
	}
	if b.group == "" {
		if _, ok := attr(proc, semconv.MessagingConsumerGroupNameKey); ok {
			t.Error("process span has a consumer group without one")
		}
	}
	wantAttr(t, proc, semconv.MessagingOperationTypeProcess)
	wantAttr(t, proc, semconv.MessagingOperationName("process"))
	wantAttr(t, proc, semconv.MessagingMessageID(msg.UUID))
	wantAttr(t, proc, semconv.MessagingMessageConversationID("corr-1"))
	wantAttr(t, proc, semconv.MessagingMessageBodySize(5))
	wantAttr(t, proc, telemetry.AttrAttempt.Int(1))
	wantAttr(t, proc, telemetry.AttrOutcome.String("acked"))
	if d, ok := attr(proc, semconv.MessagingDestinationNameKey); !ok || d.AsString() == "" {
		t.Error("process span has no messaging.destination.name")
	} else if proc.Name != "process "+d.AsString() {
		t.Errorf("process span name = %q, want \"process %s\"", proc.Name, d.AsString())
	}
	if _, ok := attr(proc, telemetry.AttrDeliveryID); !ok {
		t.Error("process span has no berth.delivery.id")
	}
	if proc.Status.Code != codes.Unset {
		t.Errorf("acked process span status = %v, want unset", proc.Status)
	}

	// The ack: a client settle span, child of the process span, within it.
	ack := s.r.span(t, "ack "+b.consumerDestination(topic))
	if ack.SpanKind != trace.SpanKindClient {
		t.Errorf("ack span kind = %s, want client", ack.SpanKind)
	}
	if ack.Parent.SpanID() != proc.SpanContext.SpanID() {
		t.Errorf("ack span parent = %s, want the process span %s", ack.Parent.SpanID(), proc.SpanContext.SpanID())
	}
	if ack.StartTime.Before(proc.StartTime) || ack.EndTime.After(proc.EndTime) {
		t.Errorf("ack span [%v, %v] is not within the process span [%v, %v]", ack.StartTime, ack.EndTime, proc.StartTime, proc.EndTime)
	}
	for _, kv := range b.consumerAttrs(topic) {
		wantAttr(t, ack, kv)
	}
	wantAttr(t, ack, semconv.MessagingOperationTypeSettle)
	wantAttr(t, ack, semconv.MessagingOperationName("ack"))
	wantAttr(t, ack, semconv.MessagingMessageID(msg.UUID))
}

// testBatch publishes three messages in one call (a create span each, a
// send span linking them) and hands the three deliveries to one batch span
// linked to every member.
func testBatch(t *testing.T, b backend) {
	s := openStack(t, b, basePipeline(), nil)
	topic := uniqueTopic("batch")
	ch := subscribe(t, s, topic)

	ctx, request := s.r.tp.Tracer("test").Start(context.Background(), "request")
	var msgs []*message.Message
	for range 3 {
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		m.SetContext(ctx)
		msgs = append(msgs, m)
	}
	if err := s.pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	request.End()
	req := s.r.span(t, "request")

	creates := s.r.spansNamed(t, "create "+topic, 3)
	send := s.r.span(t, "send "+topic)
	if send.SpanKind != trace.SpanKindClient {
		t.Errorf("batch send span kind = %s, want client", send.SpanKind)
	}
	wantAttr(t, send, semconv.MessagingBatchMessageCount(3))
	if len(send.Links) != 3 {
		t.Fatalf("batch send span has %d links, want 3", len(send.Links))
	}
	createOf := map[string]tracetest.SpanStub{}
	for i, c := range creates {
		if c.Parent.SpanID() != req.SpanContext.SpanID() {
			t.Errorf("create span %d parent = %s, want the request span", i, c.Parent.SpanID())
		}
		if c.SpanKind != trace.SpanKindProducer {
			t.Errorf("create span kind = %s, want producer", c.SpanKind)
		}
		wantAttr(t, c, semconv.MessagingOperationTypeCreate)
		id, _ := attr(c, semconv.MessagingMessageIDKey)
		createOf[id.AsString()] = c
		if send.Links[i].SpanContext.SpanID() != c.SpanContext.SpanID() {
			t.Errorf("send link %d = %s, want create span %s", i, send.Links[i].SpanContext.SpanID(), c.SpanContext.SpanID())
		}
	}

	var got []*message.Message
	for range 3 {
		got = append(got, receive(t, ch))
	}
	bctx, batch := s.obs.StartBatchSpan(context.Background(), got)
	if !trace.SpanContextFromContext(bctx).IsValid() {
		t.Error("StartBatchSpan returned a context without its span")
	}
	batch.End()
	// Members whose context carries no span are linked through their
	// metadata (to their create spans).
	var copies []*message.Message
	for _, m := range got {
		copies = append(copies, m.Copy())
	}
	_, fromMeta := s.obs.StartBatchSpan(context.Background(), copies)
	fromMeta.End()
	for _, m := range got {
		m.Ack()
	}

	var batchSpans []tracetest.SpanStub
	eventually(t, "two batch spans", func() bool {
		batchSpans = batchSpans[:0]
		for _, sp := range s.r.spans.GetSpans() {
			if _, ok := attr(sp, semconv.MessagingBatchMessageCountKey); ok && sp.SpanKind == trace.SpanKindConsumer {
				batchSpans = append(batchSpans, sp)
			}
		}
		return len(batchSpans) == 2
	})
	for _, m := range got {
		proc := processSpanOf(t, s.r, m.UUID)
		c, ok := createOf[m.UUID]
		if !ok {
			t.Fatalf("no create span for %s", m.UUID)
		}
		if proc.Parent.SpanID() != c.SpanContext.SpanID() || proc.SpanContext.TraceID() != req.SpanContext.TraceID() {
			t.Errorf("process span of %s: parent %s, want its create span %s", m.UUID, proc.Parent.SpanID(), c.SpanContext.SpanID())
		}
		for bi, want := range []trace.SpanContext{proc.SpanContext, c.SpanContext} {
			bs := batchSpans[bi]
			linked := false
			for _, l := range bs.Links {
				if l.SpanContext.SpanID() == want.SpanID() {
					linked = true
				}
			}
			if !linked {
				t.Errorf("batch span %d does not link %s (message %s)", bi, want.SpanID(), m.UUID)
			}
		}
	}
	for _, bs := range batchSpans {
		wantAttr(t, bs, semconv.MessagingBatchMessageCount(3))
		wantAttr(t, bs, semconv.MessagingOperationTypeProcess)
		if len(bs.Links) != 3 {
			t.Errorf("batch span has %d links, want 3", len(bs.Links))
		}
	}
	if !strings.HasPrefix(batchSpans[0].Name, "process ") {
		t.Errorf("batch span of one listener's members is named %q, want \"process <listener>\"", batchSpans[0].Name)
	}
}

// testMetrics drives every consumer metric: back-pressure (latched,
// queue count, batch pending), acks, a nack, a dead letter, a fault and
// its rebuild, and round trips.
func testMetrics(t *testing.T, b backend) {
	pcfg := basePipeline()
	pcfg.Concurrency = 2
	pcfg.BufferSize = 4
	pcfg.MaxQueue = 3
	pcfg.RestartQueue = 1
	pcfg.MaxAttempts = 2
	s := openStack(t, b, pcfg, nil)
	meter := s.r.mp.Meter("test")
	reg, err := telemetry.RegisterSubscriber(meter, "orders", s.sub)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.Unregister() }()
	rreg, err := telemetry.RegisterRoundTripper(meter, "transport", s.rt)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rreg.Unregister() }()

	topic := uniqueTopic("metrics")
	ch := subscribe(t, s, topic)
	sys := semconv.MessagingSystemKey.String(b.system)
	sub := telemetry.AttrSubscriber.String("orders")

	// Back-pressure: 6 messages, none acked: 2 in flight + buffered > 3.
	var held []*message.Message
	var batch []*message.Message
	for range 6 {
		m := message.NewMessage(watermill.NewUUID(), []byte("hold"))
		batch = append(batch, m)
	}
	if err := s.pub.Publish(topic, batch...); err != nil {
		t.Fatal(err)
	}
	held = append(held, receive(t, ch), receive(t, ch))
	eventually(t, "latched = 1", func() bool {
		v, _, ok := value(s.r.collect(t), telemetry.MetricLatched, sub)
		return ok && v == 1
	})
	rm := s.r.collect(t)
	if v, _, _ := value(rm, telemetry.MetricQueueCount, sub); v < 4 {
		t.Errorf("%s = %v, want ≥ 4 while latched", telemetry.MetricQueueCount, v)
	}
	if v, _, _ := value(rm, telemetry.MetricInFlight, sub); v != 2 {
		t.Errorf("%s = %v, want 2", telemetry.MetricInFlight, v)
	}
	if v, _, ok := value(rm, telemetry.MetricStatus, sub, telemetry.AttrStatus.String("too_busy")); !ok || v != 1 {
		t.Errorf("%s{status=too_busy} = %v (present %v), want 1", telemetry.MetricStatus, v, ok)
	}
	// Batch pending: one held message enters a batch stage.
	settle := receiver.EnterBatch(held[0])
	eventually(t, "batch_pending = 1", func() bool {
		v, _, ok := value(s.r.collect(t), telemetry.MetricBatchPending, sub)
		return ok && v == 1
	})
	settle()

	// Ack everything; the listener unlatches.
	var mu sync.Mutex
	acked := 0
	ackAll := func(m *message.Message) {
		mu.Lock()
		acked++
		mu.Unlock()
		m.Ack()
	}
	for _, m := range held {
		ackAll(m)
	}
	for acked < 6 {
		ackAll(receive(t, ch))
	}
	eventually(t, "latched = 0", func() bool {
		v, _, ok := value(s.r.collect(t), telemetry.MetricLatched, sub)
		return ok && v == 0
	})

	// A poison message: nacked on attempt 1, dead-lettered on attempt 2.
	poison := message.NewMessage(watermill.NewUUID(), []byte("poison"))
	if err := s.pub.Publish(topic, poison); err != nil {
		t.Fatal(err)
	}
	receive(t, ch).Nack()
	receive(t, ch).Nack()

	eventually(t, "settlement metrics", func() bool {
		rm := s.r.collect(t)
		a, _, _ := value(rm, telemetry.MetricSettledMessages, telemetry.AttrOutcome.String("acked"))
		n, _, _ := value(rm, telemetry.MetricSettledMessages, telemetry.AttrOutcome.String("nacked"))
		d, _, _ := value(rm, telemetry.MetricSettledMessages, telemetry.AttrOutcome.String("dead_lettered"))
		return a == 6 && n == 1 && d == 1
	})
	// An empty wave after the poison.
	eventually(t, "an empty wave", func() bool {
		v, _, _ := value(s.r.collect(t), telemetry.MetricReceiveWaves, telemetry.AttrResult.String("empty"))
		return v >= 1
	})

	// A fault at mapping, and the watchdog's rebuild.
	s.faults.Panic(transporttest.AtMap, 1)
	faultMsg := message.NewMessage(watermill.NewUUID(), []byte("fault"))
	if err := s.pub.Publish(topic, faultMsg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "fault and rebuild counted", func() bool {
		rm := s.r.collect(t)
		f, _, _ := value(rm, telemetry.MetricFaults)
		r, _, _ := value(rm, telemetry.MetricRebuilds)
		return f >= 1 && r >= 1
	})
	s.obs.ForListener("unmappable-listener", transport.Destination{System: b.system}).
		DeadLettered("unmappable-listener", nil, "cannot map message: bad payload")

	rm = s.r.collect(t)
	dest := func(m string) {
		t.Helper()
		mm, ok := find(rm, m)
		if !ok {
			t.Errorf("metric %s not emitted", m)
			return
		}
		for _, p := range points(mm) {
			if _, ok := p.attrs.Value(semconv.MessagingDestinationNameKey); !ok {
				t.Errorf("%s point %v has no messaging.destination.name", m, p.attrs.ToSlice())
			}
			if _, ok := p.attrs.Value(semconv.MessagingMessageIDKey); ok {
				t.Errorf("%s carries a message id: unbounded cardinality", m)
			}
		}
	}
	check := func(name, unit string, wantMin float64, kvs ...attribute.KeyValue) {
		t.Helper()
		m, ok := find(rm, name)
		if !ok {
			t.Errorf("metric %s not emitted", name)
			return
		}
		if m.Unit != unit {
			t.Errorf("metric %s unit = %q, want %q", name, m.Unit, unit)
		}
		v, c, ok := value(rm, name, kvs...)
		if !ok {
			t.Errorf("metric %s: no point with %v", name, kvs)
			return
		}
		if c > 0 { // histogram: count
			v = float64(c)
		}
		if v < wantMin {
			t.Errorf("metric %s%v = %v, want ≥ %v", name, kvs, v, wantMin)
		}
	}
	check(telemetry.MetricConsumedMessages, "{message}", 8, sys, semconv.MessagingOperationName("receive"))
	check(telemetry.MetricSettledMessages, "{message}", 6, sys, telemetry.AttrOutcome.String("acked"))
	check(telemetry.MetricSettledMessages, "{message}", 1, sys, telemetry.AttrOutcome.String("nacked"))
	check(telemetry.MetricSettledMessages, "{message}", 1, sys, telemetry.AttrOutcome.String("dead_lettered"))
	check(telemetry.MetricDeadLettered, "{message}", 1, sys, telemetry.AttrDeadLetterCause.String("attempts_exhausted"))
	check(telemetry.MetricDeadLettered, "{message}", 1, sys, telemetry.AttrDeadLetterCause.String("unmappable"),
		semconv.MessagingDestinationName("unmappable-listener"))
	check(telemetry.MetricProcessDuration, "s", 6, sys, semconv.MessagingOperationName("process"), telemetry.AttrOutcome.String("acked"))
	check(telemetry.MetricProcessDuration, "s", 1, sys, telemetry.AttrOutcome.String("nacked"), semconv.ErrorTypeKey.String("nacked"))
	check(telemetry.MetricEndToEnd, "s", 6, sys)
	check(telemetry.MetricReceiveWaves, "{wave}", 1, sys, telemetry.AttrResult.String("messages"))
	check(telemetry.MetricReceiveWaves, "{wave}", 1, sys, telemetry.AttrResult.String("empty"))
	check(telemetry.MetricReceiveProbes, "{probe}", 1, sys, telemetry.AttrResult.String("found"))
	check(telemetry.MetricReceiveProbes, "{probe}", 1, sys, telemetry.AttrResult.String("empty"))
	check(telemetry.MetricWaveSize, "{probe}", 1, sys)
	check(telemetry.MetricFaults, "{fault}", 1, sys)
	check(telemetry.MetricRebuilds, "{rebuild}", 1, sys)
	check(telemetry.MetricQueueCount, "{message}", 0, sub)
	check(telemetry.MetricBuffered, "{message}", 0, sub)
	check(telemetry.MetricInFlight, "{message}", 0, sub)
	check(telemetry.MetricBatchPending, "{message}", 0, sub)
	check(telemetry.MetricLatched, "{listener}", 0, sub)
	check(telemetry.MetricFaulted, "{listener}", 0, sub)
	check(telemetry.MetricStatus, "{listener}", 1, sub)
	check(telemetry.MetricRoundTrips, "{request}", 1, telemetry.AttrClient.String("transport"))
	// Per-listener values add up across listeners: up-down counters.
	for _, name := range []string{telemetry.MetricQueueCount, telemetry.MetricBuffered, telemetry.MetricInFlight,
		telemetry.MetricBatchPending, telemetry.MetricLatched, telemetry.MetricFaulted, telemetry.MetricStatus} {
		if m, ok := find(rm, name); ok {
			if sum, isSum := m.Data.(metricdata.Sum[int64]); !isSum || sum.IsMonotonic {
				t.Errorf("%s is %T (monotonic %v), want a non-monotonic sum (an up-down counter)", name, m.Data, sum.IsMonotonic)
			}
		}
	}
	check(telemetry.MetricSentMessages, "{message}", 8, sys, semconv.MessagingDestinationName(topic), semconv.MessagingOperationName("send"))
	check(telemetry.MetricOperationDuration, "s", 3, sys, semconv.MessagingDestinationName(topic), semconv.MessagingOperationTypeSend)

	// Receive and settlement calls: durations by operation, with the
	// consumer's destination and group.
	cons := b.consumerAttrs(topic)
	with := func(kvs ...attribute.KeyValue) []attribute.KeyValue {
		return append(cons[:len(cons):len(cons)], kvs...)
	}
	check(telemetry.MetricOperationDuration, "s", 2, with(semconv.MessagingOperationTypeReceive, semconv.MessagingOperationName("receive"))...)
	check(telemetry.MetricOperationDuration, "s", 6, with(semconv.MessagingOperationTypeSettle, semconv.MessagingOperationName("ack"))...)
	check(telemetry.MetricOperationDuration, "s", 1, with(semconv.MessagingOperationTypeSettle, semconv.MessagingOperationName("nack"))...)
	check(telemetry.MetricOperationDuration, "s", 1, with(semconv.MessagingOperationTypeSettle, semconv.MessagingOperationName("dead_letter"))...)
	// Every consumer metric and per-listener value carries them too.
	for _, name := range []string{telemetry.MetricConsumedMessages, telemetry.MetricSettledMessages, telemetry.MetricDeadLettered,
		telemetry.MetricProcessDuration, telemetry.MetricEndToEnd, telemetry.MetricReceiveWaves, telemetry.MetricReceiveProbes,
		telemetry.MetricWaveSize, telemetry.MetricRebuilds} {
		check(name, unitOf(rm, name), 1, cons...)
	}
	for _, name := range []string{telemetry.MetricQueueCount, telemetry.MetricBuffered, telemetry.MetricInFlight,
		telemetry.MetricBatchPending, telemetry.MetricLatched, telemetry.MetricFaulted} {
		check(name, unitOf(rm, name), 0, with(sub)...)
	}
	check(telemetry.MetricStatus, "{listener}", 1, with(sub)...)
	if b.group == "" {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				for _, p := range points(m) {
					if _, ok := p.attrs.Value(semconv.MessagingConsumerGroupNameKey); ok {
						t.Errorf("%s has a consumer group without one: %v", m.Name, p.attrs.ToSlice())
					}
				}
			}
		}
	}

	// Receive spans: one per receive call that claimed messages, a new
	// trace each, of kind client.
	receives := s.r.spansNamed(t, "receive "+b.consumerDestination(topic), 1)
	claimed := int64(0)
	for _, sp := range receives {
		if sp.SpanKind != trace.SpanKindClient || sp.Parent.IsValid() {
			t.Errorf("receive span: kind %s, parent %s; want client, none", sp.SpanKind, sp.Parent.SpanID())
		}
		for _, kv := range with(semconv.MessagingOperationTypeReceive, semconv.MessagingOperationName("receive")) {
			wantAttr(t, sp, kv)
		}
		n, ok := attr(sp, semconv.MessagingBatchMessageCountKey)
		if !ok || n.AsInt64() < 1 {
			t.Errorf("receive span: messaging.batch.message_count = %v (present %v), want ≥ 1", n.AsInt64(), ok)
		}
		claimed += n.AsInt64()
	}
	if claimed < 9 {
		t.Errorf("receive spans account for %d messages, want ≥ 9 (8 published, one redelivery)", claimed)
	}
	for _, m := range []string{telemetry.MetricConsumedMessages, telemetry.MetricSettledMessages, telemetry.MetricDeadLettered,
		telemetry.MetricProcessDuration, telemetry.MetricEndToEnd, telemetry.MetricReceiveWaves, telemetry.MetricReceiveProbes,
		telemetry.MetricWaveSize, telemetry.MetricFaults, telemetry.MetricRebuilds, telemetry.MetricQueueCount, telemetry.MetricStatus} {
		dest(m)
	}
	if mm, ok := find(rm, telemetry.MetricFaults); ok {
		for _, p := range points(mm) {
			if v, ok := p.attrs.Value(telemetry.AttrFaultStage); !ok || v.AsString() == "" {
				t.Errorf("%s point without %s", telemetry.MetricFaults, telemetry.AttrFaultStage)
			}
		}
	}

	// The poison's nacked and dead-lettered spans: error status, and the
	// dead-letter event. (On SQS without a redrive policy the dead-lettered
	// poison stays in the queue and may be received again later, for
	// example into the mapping fault below, whose span is released, not
	// failed: only the two failing deliveries are checked.)
	var dl *tracetest.SpanStub
	failing := 0
	for _, sp := range processSpans(s.r) {
		if v, ok := attr(sp, semconv.MessagingMessageIDKey); ok && v.AsString() == poison.UUID {
			o, _ := attr(sp, telemetry.AttrOutcome)
			if o.AsString() == "dead_lettered" {
				dl = &sp
			}
			if o.AsString() != "nacked" && o.AsString() != "dead_lettered" {
				continue
			}
			failing++
			if sp.Status.Code != codes.Error {
				t.Errorf("poison process span (%s) status = %v, want error", o.AsString(), sp.Status)
			}
		}
	}
	if failing < 2 {
		t.Errorf("poison: %d nacked or dead-lettered process spans, want 2", failing)
	}
	if dl == nil {
		t.Fatal("no dead_lettered process span")
	}
	if len(dl.Events) == 0 || dl.Events[0].Name != "berth.dead_lettered" {
		t.Errorf("dead-lettered span events = %+v, want berth.dead_lettered", dl.Events)
	}
}

// testBatchingConsume runs a batching.Consume handler whose BatchFunc
// starts one span per batch: it links every member's process span, and
// every member is acked when the batch ends.
func testBatchingConsume(t *testing.T, b backend) {
	s := openStack(t, b, basePipeline(), nil)
	topic := uniqueTopic("batching")
	ch := subscribe(t, s, topic)

	const n = 5
	var msgs []*message.Message
	for range n {
		msgs = append(msgs, message.NewMessage(watermill.NewUUID(), []byte("x")))
	}
	if err := s.pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu      sync.Mutex
		handled int
		done    = make(chan error, 1)
	)
	go func() {
		done <- batching.Consume(ctx, ch, batching.Config{MaxSize: n, MaxWait: time.Minute},
			func(ctx context.Context, batch []*message.Message) error {
				_, span := s.obs.StartBatchSpan(ctx, batch)
				defer span.End()
				mu.Lock()
				handled += len(batch)
				mu.Unlock()
				return nil
			})
	}()
	var bs tracetest.SpanStub
	eventually(t, "the batch span", func() bool {
		for _, sp := range s.r.spans.GetSpans() {
			if v, ok := attr(sp, semconv.MessagingBatchMessageCountKey); ok && sp.SpanKind == trace.SpanKindConsumer && v.AsInt64() == n {
				bs = sp
				return true
			}
		}
		return false
	})
	linked := map[trace.SpanID]bool{}
	for _, l := range bs.Links {
		linked[l.SpanContext.SpanID()] = true
	}
	for _, m := range msgs {
		proc := processSpanOf(t, s.r, m.UUID) // ends when the batch acks it
		if !linked[proc.SpanContext.SpanID()] {
			t.Errorf("batch span does not link the process span of %s", m.UUID)
		}
		wantAttr(t, proc, telemetry.AttrOutcome.String("acked"))
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// unitOf returns the unit of metric name in rm.
func unitOf(rm metricdata.ResourceMetrics, name string) string {
	m, _ := find(rm, name)
	return m.Unit
}
