package mem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/delaymeta"
	"github.com/berth-go/berth/transport"
)

// DefaultVisibilityTimeout is how long a claimed message stays invisible
// before the broker hands it out again, unless renewed.
const DefaultVisibilityTimeout = 30 * time.Second

// A Broker is an in-process message broker: one queue per (topic, consumer
// group), each with visibility timeouts, delayed redelivery and attempt
// counts, and a dead-letter list. It is safe for concurrent use. Brokers
// opened by URL (mem://name) live for the life of the process.
//
// Messages with an ordering key (metadata transport.MetadataOrderingKey)
// are handed out one at a time per key and queue, in publish order: a
// keyed message is claimable only while it is the oldest unsettled message
// of its key, so a fetched, processing, retrying (nacked, waiting out its
// backoff) or delayed message blocks the later ones of its key until it is
// acknowledged or dead-lettered — as the SQL transports' claims do.
type Broker struct {
	mu     sync.Mutex
	topics map[string]map[string]*queue // topic → group → queue
	seq    atomic.Int64
}

// NewBroker returns an empty broker.
func NewBroker() *Broker { return &Broker{topics: map[string]map[string]*queue{}} }

var (
	namedMu sync.Mutex
	named   = map[string]*Broker{}
)

// Named returns the process-wide broker called name, creating it.
func Named(name string) *Broker {
	namedMu.Lock()
	defer namedMu.Unlock()
	b, ok := named[name]
	if !ok {
		b = NewBroker()
		named[name] = b
	}
	return b
}

type state int

const (
	ready state = iota
	fetched
	processing
)

type entry struct {
	seq      int64
	key      string // ordering key; "" for none
	uuid     string
	payload  []byte
	metadata map[string]string
	attempts int
	due      time.Time
	state    state
	owner    string
	until    time.Time // lease expiry while fetched or processing
}

// DeadLetter is a message the broker moved to its dead-letter list.
type DeadLetter struct {
	Topic, Group string
	UUID         string
	Payload      []byte
	Metadata     map[string]string
	Attempts     int
	Reason       string
	At           time.Time
}

type queue struct {
	entries map[int64]*entry
	order   []int64 // ready entries in FIFO order (may hold stale ids)
	// keys holds, per ordering key, the seqs of its unsettled entries in
	// publish order: the first is the key's head, the only one claimable.
	keys   map[string][]int64
	dead   []DeadLetter
	wakers map[chan struct{}]struct{}
	// read: a default reader opened this default queue (or Ensure
	// registered one); until then it parks (see Broker.Publish).
	read bool
	// parked counts the messages parked in this default queue.
	parked int
}

func newQueue() *queue {
	return &queue{entries: map[int64]*entry{}, keys: map[string][]int64{}, wakers: map[chan struct{}]struct{}{}}
}

// head reports whether e may be claimed as far as its key goes.
func (q *queue) head(e *entry) bool { return e.key == "" || q.keys[e.key][0] == e.seq }

// settle removes e from q (acknowledged or dead-lettered), unblocking its
// key.
func (q *queue) settle(e *entry) {
	delete(q.entries, e.seq)
	if e.key == "" {
		return
	}
	seqs := q.keys[e.key]
	if i := slices.Index(seqs, e.seq); i >= 0 {
		seqs = slices.Delete(seqs, i, i+1)
	}
	if len(seqs) == 0 {
		delete(q.keys, e.key)
		return
	}
	q.keys[e.key] = seqs
	q.signal() // the key's next message may be claimable
}

// signal wakes every source of q; the broker's lock is held.
func (q *queue) signal() {
	for w := range q.wakers {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// group returns the queues of topic, created with its default queue.
func (b *Broker) group(topic string) map[string]*queue {
	g, ok := b.topics[topic]
	if !ok {
		g = map[string]*queue{"": newQueue()}
		b.topics[topic] = g
	}
	return g
}

// queue registers a reader of (topic, group) and returns its queue: a
// default reader (group "") marks the default queue read; a consumer
// group's queue, when new, receives a copy of the messages parked in the
// default queue while nobody read it.
func (b *Broker) queue(topic, group string) *queue {
	g := b.group(topic)
	q, ok := g[group]
	if !ok {
		q = newQueue()
		g[group] = q
		if dq := g[""]; !dq.read {
			b.copyParked(dq, q)
		}
	}
	if group == "" {
		q.read = true
	}
	return q
}

// copyParked copies the entries of dq, a default queue nobody read (all
// of them ready: parked), into q, in publish order.
func (b *Broker) copyParked(dq, q *queue) {
	for _, seq := range slices.Sorted(maps.Keys(dq.entries)) {
		p := dq.entries[seq]
		e := &entry{seq: b.seq.Add(1), key: p.key, uuid: p.uuid, payload: p.payload, metadata: p.metadata, due: p.due}
		if e.key != "" {
			q.keys[e.key] = append(q.keys[e.key], e.seq)
		}
		q.entries[e.seq] = e
		q.order = append(q.order, e.seq)
	}
}

// peek returns the queue of (topic, group) without registering anything:
// an empty one when there is none.
func (b *Broker) peek(topic, group string) *queue {
	if q, ok := b.topics[topic][group]; ok {
		return q
	}
	return newQueue()
}

// Publish copies msgs into the queue of every consumer group of the topic,
// and into its default queue when a default reader ever opened it (a
// Subscribe without a group, or Ensure(topic, "")) or when the topic has
// no consumer group: then the messages are parked there, and every
// consumer group created later receives a copy of those still there. A
// message is first delivered when its delay metadata says (see the package
// documentation, "Delays"); a malformed delay is read as none here,
// Publisher.Publish refuses it.
func (b *Broker) Publish(topic string, msgs ...*message.Message) { b.publish(topic, msgs) }

// publish is Publish, returning how many messages it parked.
func (b *Broker) publish(topic string, msgs []*message.Message) int {
	now := time.Now()
	due := make([]time.Time, len(msgs))
	var marks []string // nil unless a message has Watermill's delay pair
	for i, m := range msgs {
		d, _, _ := delaymeta.Delay(m.Metadata, now, delayKeys)
		due[i] = now.Add(d)
		if mark := delaymeta.Mark(m.Metadata, now, d, delayKeys); mark != "" {
			if marks == nil {
				marks = make([]string, len(msgs))
			}
			marks[i] = mark
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.group(topic)
	parked := len(g) == 1 && !g[""].read
	for group, q := range g {
		if group == "" && !q.read && !parked {
			continue
		}
		for i, m := range msgs {
			e := &entry{
				seq:      b.seq.Add(1),
				uuid:     m.UUID,
				payload:  slices.Clone(m.Payload),
				metadata: maps.Clone(map[string]string(m.Metadata)),
				due:      due[i],
				key:      m.Metadata.Get(transport.MetadataOrderingKey),
			}
			if marks != nil && marks[i] != "" {
				if e.metadata == nil {
					e.metadata = map[string]string{}
				}
				e.metadata[delaymeta.Marker] = marks[i]
			}
			if e.key != "" {
				q.keys[e.key] = append(q.keys[e.key], e.seq)
			}
			q.entries[e.seq] = e
			q.order = append(q.order, e.seq)
		}
		q.signal()
	}
	if !parked {
		return 0
	}
	g[""].parked += len(msgs)
	return len(msgs)
}

// Ensure registers a reader of (topic, group), as a subscriber's
// SubscribeInitialize does: later publishes reach the queue; a new
// consumer group's queue receives a copy of the messages parked so far;
// group "" marks the default queue read (nothing is parked any more).
func (b *Broker) Ensure(topic, group string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue(topic, group)
}

// DeadLetters returns the dead-lettered messages of (topic, group).
func (b *Broker) DeadLetters(topic, group string) []DeadLetter {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.peek(topic, group).dead)
}

// Stats counts a queue's messages by state. Blocked counts the messages
// waiting behind an earlier message of their ordering key. Parked, for a
// default queue, counts the messages parked in it so far (published while
// the topic had no consumer group and no default reader).
type Stats struct {
	Ready, Delayed, Leased, Dead, Blocked int
	Parked                                int
}

// Stats returns the counts of (topic, group).
func (b *Broker) Stats(topic, group string) Stats {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.peek(topic, group)
	var s Stats
	for _, e := range q.entries {
		switch {
		case e.state != ready && now.Before(e.until):
			s.Leased++
		case !q.head(e):
			s.Blocked++
		case now.Before(e.due):
			s.Delayed++
		default:
			s.Ready++
		}
	}
	s.Dead = len(q.dead)
	s.Parked = q.parked
	return s
}

// MetadataDelay delays a published message's first delivery by a Go
// duration ("5s"). It wins over Watermill's delay metadata.
const MetadataDelay = "berth_delay"

// delayKeys are the broker's own delay keys; internal/delaymeta reads them
// and Watermill's (components/delay).
var delayKeys = delaymeta.Keys{Delay: MetadataDelay}

func token() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// source is one subscriber's view of a queue.
type source struct {
	b          *Broker
	topic      string
	group      string
	q          *queue
	visibility time.Duration
	wake       chan struct{}
}

type handle struct {
	seq   int64
	owner string
}

type raw struct {
	uuid     string
	payload  []byte
	metadata map[string]string
}

var (
	_ transport.Source  = (*source)(nil)
	_ transport.Renewer = (*source)(nil)
	_ transport.Waker   = (*source)(nil)
)

func (s *source) Claim(ctx context.Context, max int) ([]*transport.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	owner := token()
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	q := s.q
	// Leases that expired make their entries ready again.
	for _, e := range q.entries {
		if e.state != ready && !now.Before(e.until) {
			e.state, e.owner = ready, ""
			q.order = append(q.order, e.seq)
		}
	}
	var out []*transport.Delivery
	keep := q.order[:0]
	for i, seq := range q.order {
		e, ok := q.entries[seq]
		if !ok || e.state != ready {
			continue // stale
		}
		if len(out) >= max || now.Before(e.due) || !q.head(e) {
			keep = append(keep, seq)
			continue
		}
		_ = i
		e.state, e.owner, e.until = fetched, owner, now.Add(s.visibility)
		out = append(out, &transport.Delivery{
			ID:      strconv.FormatInt(e.seq, 10),
			Attempt: e.attempts + 1,
			Handle:  handle{seq: e.seq, owner: owner},
			Raw:     raw{uuid: e.uuid, payload: e.payload, metadata: e.metadata},
		})
	}
	q.order = keep
	return out, nil
}

func (s *source) Map(d *transport.Delivery) (*message.Message, error) {
	r := d.Raw.(raw)
	msg := message.NewMessage(r.uuid, slices.Clone(r.payload))
	msg.Metadata = maps.Clone(message.Metadata(r.metadata))
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	return msg, nil
}

// owned returns the entry if the handle still owns it in one of states.
func (s *source) owned(d *transport.Delivery, states ...state) (*entry, bool) {
	h := d.Handle.(handle)
	e, ok := s.q.entries[h.seq]
	if !ok || e.owner != h.owner || !slices.Contains(states, e.state) {
		return nil, false
	}
	if !time.Now().Before(e.until) {
		return nil, false
	}
	return e, true
}

func (s *source) Begin(_ context.Context, d *transport.Delivery) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	e, ok := s.owned(d, fetched)
	if !ok {
		return transport.ErrLeaseLost
	}
	e.state = processing
	e.attempts++
	e.until = time.Now().Add(s.visibility)
	d.Attempt = e.attempts
	return nil
}

func (s *source) Complete(_ context.Context, d *transport.Delivery) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	e, ok := s.owned(d, processing)
	if !ok {
		return transport.ErrLeaseLost
	}
	s.q.settle(e)
	return nil
}

// Retry returns the message to the queue after delay with the attempt's
// line appended to its transport.MetadataAttemptErrors.
func (s *source) Retry(_ context.Context, d *transport.Delivery, delay time.Duration, reason string) error {
	line := transport.AttemptLine(d.Attempt, time.Now(), reason)
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	e, ok := s.owned(d, fetched, processing)
	if !ok {
		return transport.ErrLeaseLost
	}
	md := make(map[string]string, len(e.metadata)+1)
	maps.Copy(md, e.metadata)
	md[transport.MetadataAttemptErrors] = transport.AppendAttemptLine(md[transport.MetadataAttemptErrors], line)
	e.metadata = md
	e.state, e.owner = ready, ""
	e.due = time.Now().Add(delay)
	s.q.order = append(s.q.order, e.seq)
	s.signal()
	return nil
}

func (s *source) Release(_ context.Context, ds []*transport.Delivery) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	var back []int64
	for _, d := range ds {
		e, ok := s.owned(d, fetched)
		if !ok {
			continue
		}
		e.state, e.owner = ready, ""
		back = append(back, e.seq)
	}
	// Released entries go back to the front, in their original order.
	s.q.order = append(back, s.q.order...)
	s.signal()
	return nil
}

func (s *source) DeadLetter(_ context.Context, d *transport.Delivery, msg *message.Message, reason string) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	e, ok := s.owned(d, fetched, processing)
	if !ok {
		return transport.ErrLeaseLost
	}
	s.q.settle(e)
	s.q.dead = append(s.q.dead, DeadLetter{
		Topic: s.topic, Group: s.group, UUID: e.uuid,
		Payload: e.payload, Metadata: e.metadata,
		Attempts: e.attempts, Reason: reason, At: time.Now(),
	})
	return nil
}

func (s *source) RenewInterval() time.Duration { return s.visibility * 7 / 10 }

func (s *source) Renew(_ context.Context, ds []*transport.Delivery) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	lost := 0
	for _, d := range ds {
		e, ok := s.owned(d, fetched, processing)
		if !ok {
			lost++
			continue
		}
		e.until = time.Now().Add(s.visibility)
	}
	if lost > 0 {
		return transport.ErrLeaseLost
	}
	return nil
}

func (s *source) Wake() <-chan struct{} { return s.wake }

func (s *source) signal() { s.q.signal() }

func (s *source) Close(context.Context) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	delete(s.q.wakers, s.wake)
	return nil
}

// newSource opens a source over (topic, group).
func (b *Broker) newSource(topic, group string, visibility time.Duration) *source {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := &source{b: b, topic: topic, group: group, q: b.queue(topic, group), visibility: visibility, wake: make(chan struct{}, 1)}
	s.q.wakers[s.wake] = struct{}{}
	return s
}
