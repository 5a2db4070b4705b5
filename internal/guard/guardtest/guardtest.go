// Package guardtest holds test doubles for plug-ins that misbehave: a
// logger whose every method panics, to prove a loop that logs through
// internal/guard survives it.
package guardtest

import (
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
)

// PanicLogger is a watermill.LoggerAdapter whose every method panics after
// recording the message it was given. With returns the same logger.
type PanicLogger struct {
	mu   sync.Mutex
	msgs []string
}

var _ watermill.LoggerAdapter = (*PanicLogger)(nil)

func (l *PanicLogger) record(msg string) {
	l.mu.Lock()
	l.msgs = append(l.msgs, msg)
	l.mu.Unlock()
	panic("guardtest: logger panics: " + msg)
}

// Error records msg and panics.
func (l *PanicLogger) Error(msg string, _ error, _ watermill.LogFields) { l.record(msg) }

// Info records msg and panics.
func (l *PanicLogger) Info(msg string, _ watermill.LogFields) { l.record(msg) }

// Debug records msg and panics.
func (l *PanicLogger) Debug(msg string, _ watermill.LogFields) { l.record(msg) }

// Trace records msg and panics.
func (l *PanicLogger) Trace(msg string, _ watermill.LogFields) { l.record(msg) }

// With panics too (recording "With").
func (l *PanicLogger) With(watermill.LogFields) watermill.LoggerAdapter {
	l.record("With")
	return l
}

// Count returns how many calls gave a message containing sub.
func (l *PanicLogger) Count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}
