package telemetry

import (
	"reflect"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// propagator returns c.Propagator, or else the global propagator as it is
// now (see Config.Propagator).
func (c Config) propagator() propagation.TextMapPropagator {
	if c.Propagator != nil {
		return c.Propagator
	}
	return globalPropagator()
}

// lastGlobal caches which propagator stands for the global one: the
// global itself, or W3C Trace Context when the global propagates nothing.
// Fields allocates on composite propagators, so it is asked once per
// global rather than once per message.
var lastGlobal atomic.Pointer[globalChoice]

type globalChoice struct {
	global, use propagation.TextMapPropagator
}

// globalPropagator returns the global propagator (otel.GetTextMapPropagator)
// read now, or propagation.TraceContext when it has no fields: the global
// default propagates nothing until the application installs one, which
// would silently break every trace.
func globalPropagator() propagation.TextMapPropagator {
	g := otel.GetTextMapPropagator()
	if c := lastGlobal.Load(); c != nil && samePropagator(c.global, g) {
		return c.use
	}
	use := g
	if len(g.Fields()) == 0 {
		use = propagation.TraceContext{}
	}
	lastGlobal.Store(&globalChoice{global: g, use: use})
	return use
}

// samePropagator reports whether a and b are the same propagator value.
// The composite propagator is a slice, which == cannot compare: slices are
// the same when they share their array and length. Other values that ==
// cannot compare (or panics on, such as a struct holding a slice in an
// interface field) are never the same, so they are looked at every time.
func samePropagator(a, b propagation.TextMapPropagator) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	ta := reflect.TypeOf(a)
	if ta != reflect.TypeOf(b) {
		return false
	}
	if ta.Comparable() {
		return a == b
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.Kind() == reflect.Slice {
		return va.Pointer() == vb.Pointer() && va.Len() == vb.Len()
	}
	return false
}
