package main

import (
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineRecorder is an io.Writer for a command running in the background: it
// keeps every line written and lets a test wait for one.
type lineRecorder struct {
	mu      sync.Mutex
	partial string
	lines   []string
	added   chan struct{} // closed, and replaced, when a line is added
}

func newRecorder() *lineRecorder { return &lineRecorder{added: make(chan struct{})} }

func (r *lineRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.partial += string(p)
	for {
		i := strings.IndexByte(r.partial, '\n')
		if i < 0 {
			break
		}
		r.lines = append(r.lines, r.partial[:i])
		r.partial = r.partial[i+1:]
		close(r.added)
		r.added = make(chan struct{})
	}
	return len(p), nil
}

// String returns everything written so far.
func (r *lineRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n") + "\n" + r.partial
}

// waitFor waits up to 30s for a line starting with prefix and returns it.
func (r *lineRecorder) waitFor(t *testing.T, prefix string) string {
	t.Helper()
	return r.waitMatch(t, regexp.MustCompile("^"+regexp.QuoteMeta(prefix)))
}

// waitMatch waits up to 30s for a line matching re and returns it.
func (r *lineRecorder) waitMatch(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	seen := 0
	for {
		r.mu.Lock()
		lines, added := r.lines[seen:], r.added
		seen = len(r.lines)
		r.mu.Unlock()
		for _, l := range lines {
			if re.MatchString(l) {
				return l
			}
		}
		select {
		case <-added:
		case <-timeout.C:
			t.Fatalf("no line matching %s within 30s; output:\n%s", re, r)
		}
	}
}
