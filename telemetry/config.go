package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Config, for fields left zero.
const (
	// DefaultSystem is the messaging.system attribute when neither
	// Config.System nor the transport names one: a publisher that does not
	// implement SystemNamer (one from outside Berth, or a Berth publisher
	// wrapped by another decorator first), or Observer methods called
	// outside a listener. Berth's transports name their own (aws_sqs,
	// aws.sns, berth.postgres, berth.sqlserver, berth.sqlite, berth.mem).
	DefaultSystem = "berth"

	// DefaultCorrelationIDKey is the metadata key read for
	// messaging.message.conversation_id: Watermill's correlation id
	// (middleware.CorrelationIDMetadataKey).
	DefaultCorrelationIDKey = "correlation_id"
)

// ScopeName is the instrumentation scope of every tracer and meter this
// package creates.
const ScopeName = "github.com/berth-go/berth/telemetry"

// Config configures an Observer and a Publisher decorator. The zero value is
// the defaults: global providers, W3C trace context, child spans.
type Config struct {
	// TracerProvider creates the spans. Defaults to the global provider
	// (otel.GetTracerProvider), which forwards to the one the application
	// installs with otel.SetTracerProvider, even later.
	TracerProvider trace.TracerProvider

	// MeterProvider creates the instruments. Defaults to the global provider
	// (otel.GetMeterProvider), which forwards like the tracer provider.
	MeterProvider metric.MeterProvider

	// Propagator injects the trace context into message metadata and
	// extracts it. Defaults to the global propagator
	// (otel.GetTextMapPropagator) read at each use, so one the application
	// installs after building the Observer or Publisher is used; while the
	// global one propagates nothing (none installed), to
	// propagation.TraceContext (the traceparent and tracestate keys).
	Propagator propagation.TextMapPropagator

	// System overrides the messaging.system attribute of spans and
	// metrics. Defaults to the transport's own: the Destination.System a
	// listener binds the Observer with, and the MessagingSystem of the
	// publisher given to Publisher (see SystemNamer); else DefaultSystem.
	System string

	// Link makes each consumer span the root of a new trace with a link to
	// the producer's context, instead of its child. Use it when producer
	// and consumer traces should stay apart (long queues, fan-out).
	// Defaults to false (child spans, one trace end to end).
	Link bool

	// CorrelationIDKey is the metadata key whose value becomes
	// messaging.message.conversation_id; "-" disables it. Defaults to
	// DefaultCorrelationIDKey ("correlation_id").
	CorrelationIDKey string
}

// withDefaults returns c with every zero field set.
func (c Config) withDefaults() Config {
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	switch c.CorrelationIDKey {
	case "":
		c.CorrelationIDKey = DefaultCorrelationIDKey
	case "-":
		c.CorrelationIDKey = ""
	}
	return c
}

// A SystemNamer names its messaging system: the messaging.system value of
// the spans and metrics about it. Every Berth publisher and subscriber
// implements it; Publisher and RegisterSubscriber read it.
type SystemNamer interface {
	MessagingSystem() string
}

// system returns the messaging.system to report for a transport that
// names itself transport ("" when it does not): Config.System, transport,
// or DefaultSystem.
func (c Config) system(transport string) string {
	switch {
	case c.System != "":
		return c.System
	case transport != "":
		return transport
	default:
		return DefaultSystem
	}
}

// systemOf returns what x names as its messaging system, or "".
func systemOf(x any) string {
	if n, ok := x.(SystemNamer); ok {
		return n.MessagingSystem()
	}
	return ""
}

func (c Config) tracer() trace.Tracer {
	return c.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(schemaURL))
}

func (c Config) meter() metric.Meter {
	return c.MeterProvider.Meter(ScopeName, metric.WithSchemaURL(schemaURL))
}
