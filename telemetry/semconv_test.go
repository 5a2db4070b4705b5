package telemetry_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/berth-go/berth/telemetry"
)

// The semantic conventions this package follows, pinned against the semconv
// package it imports: the metric names and units it shares with them, the
// schema URL, every attribute key it emits (the conventions' own, or
// Berth's under berth.*), the attributes the conventions require, span
// names, and the span kind of each operation type.
func TestSemanticConventions(t *testing.T) {
	for _, m := range []struct {
		ours, name, unit string
	}{
		{telemetry.MetricConsumedMessages, messagingconv.ClientConsumedMessages{}.Name(), messagingconv.ClientConsumedMessages{}.Unit()},
		{telemetry.MetricProcessDuration, messagingconv.ProcessDuration{}.Name(), messagingconv.ProcessDuration{}.Unit()},
		{telemetry.MetricSentMessages, messagingconv.ClientSentMessages{}.Name(), messagingconv.ClientSentMessages{}.Unit()},
		{telemetry.MetricOperationDuration, messagingconv.ClientOperationDuration{}.Name(), messagingconv.ClientOperationDuration{}.Unit()},
	} {
		if m.ours != m.name {
			t.Errorf("metric %s: the conventions name it %s", m.ours, m.name)
		}
	}

	// Everything a consumer and a producer emit: single and batch publish,
	// receive, process, ack, nack, dead letter, a batch span.
	pcfg := basePipeline()
	pcfg.MaxAttempts = 2
	s := openStack(t, memBackend, pcfg, nil)
	topic := uniqueTopic("semconv")
	ch := subscribe(t, s, topic)
	if err := s.pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("one"))); err != nil {
		t.Fatal(err)
	}
	var batch []*message.Message
	for range 2 {
		batch = append(batch, message.NewMessage(watermill.NewUUID(), []byte("two")))
	}
	if err := s.pub.Publish(topic, batch...); err != nil {
		t.Fatal(err)
	}
	got := []*message.Message{receive(t, ch), receive(t, ch), receive(t, ch)}
	_, bs := s.obs.StartBatchSpan(context.Background(), got)
	bs.End()
	got[0].Ack()
	got[1].Ack()
	got[2].Nack()
	receive(t, ch).Nack() // its last attempt: dead-lettered
	s.r.span(t, "dead_letter "+topic)
	s.r.span(t, "ack "+topic)
	s.r.span(t, "nack "+topic)
	s.r.span(t, "process "+topic)
	rm := s.r.collect(t)

	// Keys: the conventions' (by their semconv constants) or Berth's own.
	conventions := map[attribute.Key]bool{}
	for _, k := range []attribute.Key{
		semconv.MessagingSystemKey, semconv.MessagingDestinationNameKey, semconv.MessagingConsumerGroupNameKey,
		semconv.MessagingOperationTypeKey, semconv.MessagingOperationNameKey, semconv.MessagingMessageIDKey,
		semconv.MessagingMessageConversationIDKey, semconv.MessagingMessageBodySizeKey,
		semconv.MessagingBatchMessageCountKey, semconv.ErrorTypeKey,
	} {
		conventions[k] = true
	}
	checkKey := func(where string, k attribute.Key) {
		t.Helper()
		switch {
		case conventions[k]:
		case strings.HasPrefix(string(k), "berth."):
		default:
			t.Errorf("%s: attribute %s is neither the conventions' (semconv %s) nor Berth's (berth.*)", where, k, semconv.SchemaURL)
		}
	}

	// Span kind by operation type.
	kinds := map[attribute.Value]trace.SpanKind{
		semconv.MessagingOperationTypeCreate.Value:  trace.SpanKindProducer,
		semconv.MessagingOperationTypeReceive.Value: trace.SpanKindClient,
		semconv.MessagingOperationTypeProcess.Value: trace.SpanKindConsumer,
		semconv.MessagingOperationTypeSettle.Value:  trace.SpanKindClient,
	}
	seen := map[attribute.Value]bool{}
	for _, sp := range s.r.spans.GetSpans() {
		if sp.InstrumentationScope.Name != telemetry.ScopeName {
			continue
		}
		if sp.InstrumentationScope.SchemaURL != semconv.SchemaURL {
			t.Errorf("span %q: schema URL %q, want %q", sp.Name, sp.InstrumentationScope.SchemaURL, semconv.SchemaURL)
		}
		set := attribute.NewSet(sp.Attributes...)
		for _, kv := range sp.Attributes {
			checkKey("span "+sp.Name, kv.Key)
		}
		for _, l := range sp.Links {
			for _, kv := range l.Attributes {
				checkKey("link of span "+sp.Name, kv.Key)
			}
		}
		for _, k := range []attribute.Key{semconv.MessagingSystemKey, semconv.MessagingOperationNameKey, semconv.MessagingOperationTypeKey} {
			if _, ok := set.Value(k); !ok {
				t.Errorf("span %q has no %s", sp.Name, k)
			}
		}
		op, _ := set.Value(semconv.MessagingOperationTypeKey)
		seen[op] = true
		want, ok := kinds[op]
		if op == semconv.MessagingOperationTypeSend.Value {
			// Producer when its context is the creation context (one
			// message), client when it links create spans (a batch).
			want, ok = trace.SpanKindProducer, true
			if _, batch := set.Value(semconv.MessagingBatchMessageCountKey); batch {
				want = trace.SpanKindClient
			}
		}
		if !ok {
			t.Errorf("span %q: operation type %q is not one of the conventions'", sp.Name, op.String())
		} else if sp.SpanKind != want {
			t.Errorf("span %q (%s): kind %s, want %s", sp.Name, op.String(), sp.SpanKind, want)
		}
		checkSpanName(t, sp, set)
	}
	for _, op := range []attribute.KeyValue{semconv.MessagingOperationTypeCreate, semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationTypeReceive, semconv.MessagingOperationTypeProcess, semconv.MessagingOperationTypeSettle} {
		if !seen[op.Value] {
			t.Errorf("no span of operation type %s", op.Value.String())
		}
	}

	// Metrics: keys, units, and the conventions' required attributes on
	// their own metrics.
	units := map[string]string{
		messagingconv.ClientConsumedMessages{}.Name():  messagingconv.ClientConsumedMessages{}.Unit(),
		messagingconv.ProcessDuration{}.Name():         messagingconv.ProcessDuration{}.Unit(),
		messagingconv.ClientSentMessages{}.Name():      messagingconv.ClientSentMessages{}.Unit(),
		messagingconv.ClientOperationDuration{}.Name(): messagingconv.ClientOperationDuration{}.Unit(),
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == telemetry.ScopeName && sm.Scope.SchemaURL != semconv.SchemaURL {
			t.Errorf("meter schema URL %q, want %q", sm.Scope.SchemaURL, semconv.SchemaURL)
		}
		for _, m := range sm.Metrics {
			unit, ours := units[m.Name]
			if !ours && !strings.HasPrefix(m.Name, "berth.") {
				t.Errorf("metric %s is neither the conventions' nor Berth's (berth.*)", m.Name)
			}
			if ours && m.Unit != unit {
				t.Errorf("metric %s: unit %q, the conventions say %q", m.Name, m.Unit, unit)
			}
			for _, p := range points(m) {
				for _, kv := range p.attrs.ToSlice() {
					checkKey("metric "+m.Name, kv.Key)
				}
				if !ours {
					continue
				}
				for _, k := range []attribute.Key{semconv.MessagingSystemKey, semconv.MessagingOperationNameKey} {
					if _, ok := p.attrs.Value(k); !ok {
						t.Errorf("metric %s: point %v has no %s", m.Name, p.attrs.ToSlice(), k)
					}
				}
			}
		}
	}
}

// checkSpanName checks a messaging span's name: "{messaging.operation.name}
// {destination}", or the operation name alone without a destination.
func checkSpanName(t *testing.T, sp tracetest.SpanStub, set attribute.Set) {
	t.Helper()
	op, _ := set.Value(semconv.MessagingOperationNameKey)
	want := op.AsString()
	if dest, ok := set.Value(semconv.MessagingDestinationNameKey); ok {
		want += " " + dest.AsString()
	}
	if sp.Name != want {
		t.Errorf("span name %q, want %q ({%s} {%s})", sp.Name, want, semconv.MessagingOperationNameKey, semconv.MessagingDestinationNameKey)
	}
}
