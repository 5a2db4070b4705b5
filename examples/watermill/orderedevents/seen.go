package main

import (
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
)

// event names one event: whose it is and its type.
type event struct{ Subscriber, Name string }

// seen records what the example does, for its test and its summary: the
// events in the order they were published, the events each event group
// handled in the order it handled them, and the read models.
type seen struct {
	marshaler cqrs.CommandEventMarshaler
	want      int           // events the traffic makes
	changed   chan struct{} // a signal after each handled event

	subscribers *SubscriberReadModel       // the SubscriberReadModel group's
	activity    *ActivityTimelineReadModel // the ActivityTimelineReadModel group's
	// replica is a SubscriberReadModel fed every event as it is published,
	// in publish order: what the group's read model must end up as.
	replica *SubscriberReadModel

	mu        sync.Mutex
	published []event
	handled   map[string][]event            // event group → events in handling order
	distinct  map[string]map[event]struct{} // event group → events handled at least once
}

func newSeen(marshaler cqrs.CommandEventMarshaler, want int, subscribers *SubscriberReadModel, activity *ActivityTimelineReadModel) *seen {
	return &seen{
		marshaler:   marshaler,
		want:        want,
		changed:     make(chan struct{}, 1),
		subscribers: subscribers,
		activity:    activity,
		replica:     NewSubscriberReadModel(),
		handled:     map[string][]event{},
		distinct:    map[string]map[event]struct{}{},
	}
}

// recordPublished wraps pub so that each event is recorded once its
// publish has returned. Publishes of events run one at a time, so that the
// recorded order is the order of the publishes: two overlapping publishes
// of one key have no order between them (docs/ordering.md), and the
// command handlers, each a consumer group, publish concurrently.
func (s *seen) recordPublished(pub message.Publisher) message.Publisher {
	return &recordingPublisher{Publisher: pub, s: s}
}

type recordingPublisher struct {
	message.Publisher
	s  *seen
	mu sync.Mutex // one publish of an event at a time
}

// Publish implements message.Publisher.
func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic != eventsTopic {
		return p.Publisher.Publish(topic, msgs...)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	for _, m := range msgs {
		if err := p.s.addPublished(m); err != nil {
			return err
		}
	}
	return nil
}

// addPublished records a published event and applies it to the replica.
func (s *seen) addPublished(msg *message.Message) error {
	e := event{Subscriber: msg.Metadata.Get(PartitionKeyMetadataField), Name: s.marshaler.NameFromMessage(msg)}
	var err error
	switch e.Name {
	case "SubscriberSubscribed":
		v := &SubscriberSubscribed{}
		if err = s.marshaler.Unmarshal(msg, v); err == nil {
			err = s.replica.OnSubscribed(msg.Context(), v)
		}
	case "SubscriberUnsubscribed":
		v := &SubscriberUnsubscribed{}
		if err = s.marshaler.Unmarshal(msg, v); err == nil {
			err = s.replica.OnUnsubscribed(msg.Context(), v)
		}
	case "SubscriberEmailUpdated":
		v := &SubscriberEmailUpdated{}
		if err = s.marshaler.Unmarshal(msg, v); err == nil {
			err = s.replica.OnEmailUpdated(msg.Context(), v)
		}
	default:
		err = fmt.Errorf("unknown event %q", e.Name)
	}
	if err != nil {
		return fmt.Errorf("record event %s: %w", msg.UUID, err)
	}
	s.mu.Lock()
	s.published = append(s.published, e)
	s.mu.Unlock()
	return nil
}

// recordHandled is a middleware for the router of an event group: it
// records each event the group handled without error, before the router
// acks it.
func (s *seen) recordHandled(group string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err != nil {
				return out, err
			}
			e := event{Subscriber: msg.Metadata.Get(PartitionKeyMetadataField), Name: s.marshaler.NameFromMessage(msg)}
			s.mu.Lock()
			s.handled[group] = append(s.handled[group], e)
			if s.distinct[group] == nil {
				s.distinct[group] = map[event]struct{}{}
			}
			s.distinct[group][e] = struct{}{}
			s.mu.Unlock()
			select {
			case s.changed <- struct{}{}:
			default:
			}
			return out, nil
		}
	}
}

// done reports whether every event group handled every event.
func (s *seen) done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range eventGroups {
		if len(s.distinct[g]) < s.want {
			return false
		}
	}
	return true
}

// publishedEvents returns the published events, in publish order.
func (s *seen) publishedEvents() []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event(nil), s.published...)
}

// handledEvents returns the events group handled, in handling order.
func (s *seen) handledEvents(group string) []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event(nil), s.handled[group]...)
}

// handledCounts returns how many distinct events each event group handled.
func (s *seen) handledCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := map[string]int{}
	for _, g := range eventGroups {
		c[g] = len(s.distinct[g])
	}
	return c
}

// bySubscriber groups events by subscriber, keeping their order.
func bySubscriber(events []event) map[string][]string {
	m := map[string][]string{}
	for _, e := range events {
		m[e.Subscriber] = append(m[e.Subscriber], e.Name)
	}
	return m
}
