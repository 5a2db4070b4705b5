package console

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/berth-go/berth/internal/inspect"
)

// Sample is one queue's counts at one time.
type Sample struct {
	At           time.Time `json:"at"`
	Ready        int64     `json:"ready"`
	Delayed      int64     `json:"delayed"`
	InFlight     int64     `json:"in_flight"`
	DeadLettered int64     `json:"dead_lettered"`
	// Drained is how many messages left the queue (settled or dead-lettered)
	// per minute since the previous sample, estimated from the drop of the
	// backlog: a lower bound when messages also arrived. -1 on the first.
	Drained float64 `json:"drained_per_minute"`
}

// historyStore is a Source that keeps the console's history in its
// database (inspect.SQL): one sample per queue and minute.
type historyStore interface {
	// RecordHistory stores qs as the minute of at and deletes each
	// queue's samples older than before.
	RecordHistory(ctx context.Context, at time.Time, qs []inspect.QueueStats, before time.Time) error
	// History returns the stored samples taken at or after since.
	History(ctx context.Context, since time.Time) ([]inspect.HistorySample, error)
}

// history holds the samples by queue: every sample of the last window
// (dense), and one a minute for the last keep (minutes), read from the
// database at start and added to as the sampler runs.
type history struct {
	mu      sync.Mutex
	window  time.Duration
	keep    time.Duration
	byName  map[string][]Sample
	minutes map[string][]Sample
	tg      map[string]topicGroup // each queue's topic and group, as last sampled
}

// topicGroup is a queue's topic and consumer group.
type topicGroup struct{ topic, group string }

func newHistory(window, keep time.Duration) *history {
	return &history{window: window, keep: keep, byName: map[string][]Sample{}, minutes: map[string][]Sample{}, tg: map[string]topicGroup{}}
}

func drained(p, s Sample) float64 {
	dt := s.At.Sub(p.At).Minutes()
	if dt <= 0 {
		return -1
	}
	drop := (p.Ready + p.Delayed + p.InFlight) - (s.Ready + s.Delayed + s.InFlight)
	return max(0, float64(drop)) / dt
}

func (h *history) add(now time.Time, qs []inspect.QueueStats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setTopicsLocked(qs)
	for _, q := range qs {
		s := Sample{At: now, Ready: q.Ready, Delayed: q.Delayed, InFlight: q.InFlight, DeadLettered: q.DeadLettered, Drained: -1}
		prev := h.byName[q.Queue]
		if n := len(prev); n > 0 {
			s.Drained = drained(prev[n-1], s)
		}
		cut := 0
		for cut < len(prev) && now.Sub(prev[cut].At) > h.window {
			cut++
		}
		h.byName[q.Queue] = append(prev[cut:], s)
		h.addMinute(q.Queue, s, now)
	}
}

// addMinute appends s to the queue's minutes unless its minute is there.
func (h *history) addMinute(name string, s Sample, now time.Time) {
	ms := h.minutes[name]
	if n := len(ms); n > 0 {
		if !ms[n-1].At.Truncate(time.Minute).Before(s.At.Truncate(time.Minute)) {
			return
		}
		s.Drained = drained(ms[n-1], s)
	} else {
		s.Drained = -1
	}
	cut := 0
	for cut < len(ms) && now.Sub(ms[cut].At) > h.keep {
		cut++
	}
	h.minutes[name] = append(ms[cut:], s)
}

// load puts stored samples (ordered by queue and time) before the
// minutes sampled since the console started.
func (h *history) load(now time.Time, stored []inspect.HistorySample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	byQueue := map[string][]Sample{}
	for _, st := range stored {
		if now.Sub(st.At) > h.keep {
			continue
		}
		ms := byQueue[st.Queue]
		s := Sample{At: st.At, Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight, DeadLettered: st.DeadLettered, Drained: -1}
		if n := len(ms); n > 0 {
			s.Drained = drained(ms[n-1], s)
		}
		byQueue[st.Queue] = append(ms, s)
	}
	for name, old := range byQueue {
		ms := h.minutes[name]
		if len(ms) > 0 {
			first := ms[0].At.Truncate(time.Minute)
			n := 0
			for n < len(old) && old[n].At.Truncate(time.Minute).Before(first) {
				n++
			}
			old = old[:n]
			if n > 0 {
				ms[0].Drained = drained(old[n-1], ms[0])
			}
		}
		h.minutes[name] = append(old, ms...)
	}
}

func (h *history) setTopics(qs []inspect.QueueStats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setTopicsLocked(qs)
}

func (h *history) setTopicsLocked(qs []inspect.QueueStats) {
	for _, q := range qs {
		if q.Topic != "" {
			h.tg[q.Queue] = topicGroup{q.Topic, q.Group}
		}
	}
}

// topics returns a copy of each queue's topic and group.
func (h *history) topics() map[string]topicGroup {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.tg)
}

// names returns the sampled queues' names, sorted.
func (h *history) names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.byName))
	for n := range h.byName {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// get returns the queue's samples, oldest first: one a minute before the
// dense window, then every one in it.
func (h *history) get(name string) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	dense, ms := h.byName[name], h.minutes[name]
	if len(dense) == 0 {
		return slices.Clone(ms)
	}
	first := dense[0].At.Truncate(time.Minute)
	out := make([]Sample, 0, len(ms)+len(dense))
	for _, m := range ms {
		if !m.At.Before(first) {
			break
		}
		out = append(out, m)
	}
	return append(out, dense...)
}

// rate is the queue's mean drain rate per minute over the dense window;
// -1 when there are fewer than two samples.
func (h *history) rate(name string) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	sum, n := 0.0, 0
	for _, s := range h.byName[name] {
		if s.Drained >= 0 {
			sum += s.Drained
			n++
		}
	}
	if n == 0 {
		return -1
	}
	return sum / float64(n)
}
