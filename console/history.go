package console

import (
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

// history is the rolling window of samples by queue.
type history struct {
	mu     sync.Mutex
	window time.Duration
	byName map[string][]Sample
}

func newHistory(window time.Duration) *history {
	return &history{window: window, byName: map[string][]Sample{}}
}

func (h *history) add(now time.Time, qs []inspect.QueueStats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, q := range qs {
		s := Sample{At: now, Ready: q.Ready, Delayed: q.Delayed, InFlight: q.InFlight, DeadLettered: q.DeadLettered, Drained: -1}
		prev := h.byName[q.Queue]
		if n := len(prev); n > 0 {
			p := prev[n-1]
			if dt := now.Sub(p.At).Minutes(); dt > 0 {
				drop := (p.Ready + p.Delayed + p.InFlight) - (s.Ready + s.Delayed + s.InFlight)
				s.Drained = max(0, float64(drop)) / dt
			}
		}
		cut := 0
		for cut < len(prev) && now.Sub(prev[cut].At) > h.window {
			cut++
		}
		h.byName[q.Queue] = append(prev[cut:], s)
	}
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

// get returns a copy of the queue's samples, oldest first.
func (h *history) get(name string) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.byName[name])
}

// rate is the queue's mean drain rate per minute over the window; -1 when
// there are fewer than two samples.
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
