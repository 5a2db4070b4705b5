package sqlqueue

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/transport"
)

// The idle probe's interval doubles from the base while probes find
// nothing, stays at the cap, starts over on a find or a reset, and never
// waits past the earliest future due time.
func TestIdleSchedule(t *testing.T) {
	s := newIdleSchedule(time.Second, 10*time.Second)
	var got []time.Duration
	for range 6 {
		got = append(got, s.next(false, 0))
	}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("waits %v, want %v seconds", got, want)
		}
	}
	if w := s.next(false, 300*time.Millisecond); w != 300*time.Millisecond+dueSlack {
		t.Errorf("with a row due in 300ms: wait %s, want 305ms", w)
	}
	if w := s.next(true, 0); w != time.Second {
		t.Errorf("after a find: wait %s, want the base 1s", w)
	}
	s.next(false, 0)
	s.reset()
	if w := s.next(false, 0); w != time.Second {
		t.Errorf("after a reset: wait %s, want the base 1s", w)
	}
	if s := newIdleSchedule(time.Millisecond, 10*time.Second); s.base != idleProbeFloor {
		t.Errorf("base below the floor: %s, want %s", s.base, idleProbeFloor)
	}
	if s := newIdleSchedule(time.Minute, 10*time.Second); s.base != 10*time.Second {
		t.Errorf("base above the cap: %s, want the cap", s.base)
	}
}

// Out-of-range IdleProbeMax values are ErrInvalidConfig naming the field
// (internal/sqlurl's test reads idle_probe_max from a URL).
func TestIdleProbeMaxConfig(t *testing.T) {
	if d := (SubscriberConfig{}).withDefaults().IdleProbeMax; d != DefaultIdleProbeMax {
		t.Errorf("zero value: %s, want DefaultIdleProbeMax", d)
	}
	for _, bad := range []time.Duration{time.Millisecond, 2 * time.Hour} {
		err := SubscriberConfig{IdleProbeMax: bad}.Validate()
		if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "IdleProbeMax") {
			t.Errorf("IdleProbeMax %s: %v, want ErrInvalidConfig naming IdleProbeMax", bad, err)
		}
	}
	if err := (SubscriberConfig{IdleProbeMax: -1}).Validate(); strings.Contains(fmt.Sprint(err), "IdleProbeMax") {
		t.Errorf("negative (disabled) refused: %v", err)
	}
}

// The prober hands its parked queues to MultiProbe in name order, whatever
// its map's order: the same set gives the same statements (and chunks).
func TestParkedQueuesInNameOrder(t *testing.T) {
	p := &prober{queues: map[string]*probeQueue{}}
	var want []string
	for i := range 30 {
		name := fmt.Sprintf("berth_q_t%02d", i)
		want = append(want, name)
		s := &Source{}
		s.parked.Store(true)
		p.queues[name] = &probeQueue{q: Queue{Name: name}, srcs: map[*Source]struct{}{s: {}}}
	}
	for range 5 {
		var got []string
		for _, q := range p.parkedQueues() {
			got = append(got, q.Name)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("parked queues %v, want %v", got, want)
		}
	}
}
