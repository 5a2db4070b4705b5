package receiver_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// seqSource is a gateSource whose deliveries "k-n" have sequence key k
// ("u-n": none), and which records renewals.
type seqSource struct {
	*gateSource
	renewMu sync.Mutex
	renewed map[string]int
}

func newSeqSource() *seqSource {
	return &seqSource{gateSource: newGateSource(), renewed: map[string]int{}}
}

func (s *seqSource) SequenceKey(d *transport.Delivery) string {
	k, _, _ := strings.Cut(d.ID, "-")
	if k == "u" {
		return ""
	}
	return k
}

func (s *seqSource) RenewInterval() time.Duration { return 5 * time.Millisecond }
func (s *seqSource) Renew(_ context.Context, ds []*transport.Delivery) error {
	s.renewMu.Lock()
	defer s.renewMu.Unlock()
	for _, d := range ds {
		s.renewed[d.ID]++
	}
	return nil
}

func (s *seqSource) renewCount(id string) int {
	s.renewMu.Lock()
	defer s.renewMu.Unlock()
	return s.renewed[id]
}

func (s *seqSource) releasedIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.released)
}

func deliveries(ids ...string) []*transport.Delivery {
	ds := make([]*transport.Delivery, len(ids))
	for i, id := range ids {
		ds[i] = &transport.Delivery{ID: id, Raw: id}
	}
	return ds
}

// noMessage fails if out delivers within a short while. It cannot prove a
// message never comes; the tests that use it also check the final state.
func noMessage(t *testing.T, out chan *message.Message, why string) {
	t.Helper()
	select {
	case m := <-out:
		t.Fatalf("%s: got %s", why, m.UUID)
	case <-time.After(50 * time.Millisecond):
	}
}

// A sequenced source gets one delivery per key in flight, in claim order,
// while other keys and unkeyed deliveries go on; a key's later deliveries
// wait in the buffer, renewed, until the earlier one is acked.
func TestSequencedDispatchOnePerKey(t *testing.T) {
	src := newSeqSource()
	r, out := start(t, src, receiver.Config{Concurrency: 8})
	r.Push(deliveries("a-1", "a-2", "b-1", "a-3", "u-1", "u-2"))
	got := map[string]*message.Message{}
	for range 4 {
		m := recv(t, out)
		got[m.UUID] = m
	}
	for _, id := range []string{"a-1", "b-1", "u-1", "u-2"} {
		if got[id] == nil {
			t.Fatalf("delivered %v; want a-1, b-1, u-1, u-2 first", keysOf(got))
		}
	}
	noMessage(t, out, "a-2 must wait for a-1")
	if r.Buffered() != 2 {
		t.Fatalf("buffered = %d, want 2 (a-2, a-3 held)", r.Buffered())
	}
	waitFor(t, "the held deliveries renewed", func() bool { return src.renewCount("a-2") > 0 && src.renewCount("a-3") > 0 })
	got["a-1"].Ack()
	if m := recv(t, out); m.UUID != "a-2" {
		t.Fatalf("got %s after a-1's ack, want a-2", m.UUID)
	} else {
		noMessage(t, out, "a-3 must wait for a-2")
		m.Ack()
	}
	if m := recv(t, out); m.UUID != "a-3" {
		t.Fatalf("got %s, want a-3", m.UUID)
	} else {
		m.Ack()
	}
	for _, id := range []string{"b-1", "u-1", "u-2"} {
		got[id].Ack()
	}
	if rel := src.releasedIDs(); len(rel) != 0 {
		t.Fatalf("released %v; want nothing", rel)
	}
}

// When a key's delivery in flight is nacked (or otherwise not acked), the
// key's buffered deliveries are released, never handled before it.
func TestSequencedNackReleasesTheKeysRest(t *testing.T) {
	src := newSeqSource()
	r, out := start(t, src, receiver.Config{Concurrency: 4})
	r.Push(deliveries("a-1", "a-2", "a-3", "b-1", "b-2"))
	first := map[string]*message.Message{}
	for range 2 {
		m := recv(t, out)
		first[m.UUID] = m
	}
	if first["a-1"] == nil || first["b-1"] == nil {
		t.Fatalf("delivered %v first; want a-1 and b-1", keysOf(first))
	}
	first["a-1"].Nack()
	waitFor(t, "a-2 and a-3 released", func() bool {
		return slices.Equal(src.releasedIDs(), []string{"a-2", "a-3"})
	})
	first["b-1"].Ack()
	if m := recv(t, out); m.UUID != "b-2" {
		t.Fatalf("got %s, want b-2", m.UUID)
	} else {
		m.Ack()
	}
	if r.Buffered() != 0 {
		t.Fatalf("buffered = %d, want 0", r.Buffered())
	}
	src.mu.Lock()
	_, retried := src.retried["a-1"]
	src.mu.Unlock()
	if !retried {
		t.Fatal("a-1 was not retried")
	}
}

// A delivery dropped at the lease gate frees its key and hands back the
// key's rest as well.
func TestSequencedLeaseLostReleasesTheKeysRest(t *testing.T) {
	src := newSeqSource()
	r, out := start(t, src, receiver.Config{Concurrency: 2})
	// "lost" has key "lost": the gate drops it.
	r.Push(deliveries("lost", "lost-2", "c-1"))
	if m := recv(t, out); m.UUID != "c-1" {
		t.Fatalf("got %s, want c-1", m.UUID)
	} else {
		m.Ack()
	}
	waitFor(t, "lost-2 released", func() bool { return slices.Equal(src.releasedIDs(), []string{"lost-2"}) })
	if r.Buffered() != 0 {
		t.Fatalf("buffered = %d, want 0", r.Buffered())
	}
}

// OrderedNackDeadLetter dead-letters a nacked keyed message at once (key
// from the Sequencer or from MetadataOrderingKey); unkeyed messages are
// retried as before.
func TestOrderedNackDeadLetter(t *testing.T) {
	t.Run("sequencer", func(t *testing.T) {
		src := newSeqSource()
		r, out := start(t, src, receiver.Config{Concurrency: 2, OrderedNack: receiver.OrderedNackDeadLetter})
		pushAndNack(t, r, out, deliveries("a-1", "u-1"))
		checkNackOutcome(t, src.gateSource, "a-1", "u-1")
	})
	t.Run("metadata", func(t *testing.T) {
		src := &keyedMetaSource{newGateSource()}
		r, out := start(t, src, receiver.Config{Concurrency: 2, OrderedNack: receiver.OrderedNackDeadLetter})
		pushAndNack(t, r, out, deliveries("k-1", "u-1"))
		checkNackOutcome(t, src.gateSource, "k-1", "u-1")
	})
	t.Run("block", func(t *testing.T) {
		src := &keyedMetaSource{newGateSource()}
		r, out := start(t, src, receiver.Config{Concurrency: 2})
		pushAndNack(t, r, out, deliveries("k-1"))
		waitFor(t, "k-1 retried", func() bool {
			src.mu.Lock()
			defer src.mu.Unlock()
			_, ok := src.retried["k-1"]
			return ok && len(src.dead) == 0
		})
	})
}

// keyedMetaSource sets MetadataOrderingKey on deliveries whose ID does not
// start with "u", as the SQL transports and mem:// do.
type keyedMetaSource struct{ *gateSource }

func (s *keyedMetaSource) Map(d *transport.Delivery) (*message.Message, error) {
	m, err := s.gateSource.Map(d)
	if err == nil && !strings.HasPrefix(d.ID, "u") {
		m.Metadata.Set(transport.MetadataOrderingKey, "key")
	}
	return m, err
}

// pushAndNack pushes ds and nacks each message delivered.
func pushAndNack(t *testing.T, r receiver.Stage, out chan *message.Message, ds []*transport.Delivery) {
	t.Helper()
	r.Push(ds)
	for range ds {
		recv(t, out).Nack()
	}
}

func checkNackOutcome(t *testing.T, src *gateSource, keyed, unkeyed string) {
	t.Helper()
	waitFor(t, "both settled", func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		_, retried := src.retried[unkeyed]
		return retried && src.dead[keyed] != ""
	})
	src.mu.Lock()
	defer src.mu.Unlock()
	if !strings.Contains(src.dead[keyed], "ordered_nack=dead_letter") {
		t.Fatalf("reason %q does not name the option", src.dead[keyed])
	}
	if _, ok := src.retried[keyed]; ok {
		t.Fatalf("%s retried; want it dead-lettered only", keyed)
	}
	if _, ok := src.dead[unkeyed]; ok {
		t.Fatalf("%s dead-lettered; want it retried", unkeyed)
	}
}

func TestOrderedNackValidate(t *testing.T) {
	err := receiver.Config{OrderedNack: "skip"}.Validate()
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "OrderedNack") {
		t.Fatalf("Validate() = %v; want ErrInvalidConfig naming OrderedNack", err)
	}
	for _, v := range []receiver.OrderedNack{"", receiver.OrderedNackBlock, receiver.OrderedNackDeadLetter} {
		if err := (receiver.Config{OrderedNack: v}).Validate(); err != nil {
			t.Fatalf("Validate(%q) = %v", v, err)
		}
	}
}

func keysOf(m map[string]*message.Message) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// failingAckSource fails the ack of "a-1": the message stays the broker's
// (it returns after its lease), so the key's rest must be handed back.
type failingAckSource struct{ *seqSource }

func (s *failingAckSource) Complete(ctx context.Context, d *transport.Delivery) error {
	if d.ID == "a-1" {
		return errors.New("broker unavailable")
	}
	return s.seqSource.Complete(ctx, d)
}

func TestSequencedFailedAckReleasesTheKeysRest(t *testing.T) {
	src := &failingAckSource{newSeqSource()}
	r, out := start(t, src, receiver.Config{Concurrency: 2})
	r.Push(deliveries("a-1", "a-2"))
	recv(t, out).Ack()
	waitFor(t, "a-2 released", func() bool { return slices.Equal(src.releasedIDs(), []string{"a-2"}) })
	noMessage(t, out, "a-2 must not be handled after a-1's ack failed")
}
