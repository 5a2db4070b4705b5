package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Config, for fields left zero.
const (
	// DefaultSystem is the messaging.system attribute when Config.System is
	// empty. Set Config.System to "aws_sqs" for the SQS transport, the
	// well-known value of the semantic conventions.
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

	// System is the messaging.system attribute of spans and metrics.
	// Defaults to DefaultSystem ("berth"); use "aws_sqs" for SQS.
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
	if c.System == "" {
		c.System = DefaultSystem
	}
	switch c.CorrelationIDKey {
	case "":
		c.CorrelationIDKey = DefaultCorrelationIDKey
	case "-":
		c.CorrelationIDKey = ""
	}
	return c
}

func (c Config) tracer() trace.Tracer {
	return c.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(schemaURL))
}

func (c Config) meter() metric.Meter {
	return c.MeterProvider.Meter(ScopeName, metric.WithSchemaURL(schemaURL))
}
