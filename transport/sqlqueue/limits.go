package sqlqueue

import (
	"fmt"

	"github.com/berth-go/berth/transport"
)

// Limits are the longest values a dialect's columns hold, in the unit
// Length counts. A zero limit means none.
type Limits struct {
	// UUID bounds a message UUID (the queue table's uuid column).
	UUID int
	// Topic bounds a topic (the subscriptions table's topic column).
	Topic int
	// ConsumerGroup bounds a consumer group name.
	ConsumerGroup int
	// OrderingKey bounds a message's ordering key (the queue table's
	// ordering_key column, see transport.MetadataOrderingKey).
	OrderingKey int
	// MessageSize bounds PublisherConfig.MaxMessageSize, in bytes (SQL
	// Server: the size of one INSERT statement).
	MessageSize int
	// Length measures a value in the columns' unit (SQL Server's nvarchar
	// counts UTF-16 code units); nil counts bytes.
	Length func(string) int
}

// Limiter is implemented by dialects whose columns bound the UUID, topic,
// consumer group or ordering key (SQL Server's nvarchar(n); the ordering
// key on every dialect, which indexes it), or whose statements bound the
// message size. The engine checks them in Go, so a user gets an error
// naming the limit instead of the server's truncation error (2628, 8152).
type Limiter interface {
	Limits() Limits
}

func (l Limits) length(s string) int {
	if l.Length != nil {
		return l.Length(s)
	}
	return len(s)
}

// checkNames reports a topic or consumer group longer than d's columns
// hold, wrapped in transport.ErrInvalidConfig.
func checkNames(d Dialect, topic, group string) error {
	if err := nameLimits(d, topic, group); err != nil {
		return fmt.Errorf("%w: %w", transport.ErrInvalidConfig, err)
	}
	return nil
}

// nameLimits is checkNames without the sentinel, naming the field.
func nameLimits(d Dialect, topic, group string) error {
	lm, ok := d.(Limiter)
	if !ok {
		return nil
	}
	l := lm.Limits()
	if n := l.length(topic); l.Topic > 0 && n > l.Topic {
		return fmt.Errorf("topic: at most %d characters on %s, got %d", l.Topic, d.Name(), n)
	}
	if n := l.length(group); l.ConsumerGroup > 0 && n > l.ConsumerGroup {
		return fmt.Errorf("ConsumerGroup: at most %d characters on %s, got %d", l.ConsumerGroup, d.Name(), n)
	}
	return nil
}

// checkUUID reports a message UUID longer than d's column holds, wrapped
// in transport.ErrInvalidMessage.
func checkUUID(d Dialect, uuid string) error {
	lm, ok := d.(Limiter)
	if !ok {
		return nil
	}
	l := lm.Limits()
	if n := l.length(uuid); l.UUID > 0 && n > l.UUID {
		return fmt.Errorf("%w: message UUID %.40q… is %d characters, at most %d on %s", transport.ErrInvalidMessage, uuid, n, l.UUID, d.Name())
	}
	return nil
}

// checkOrderingKey reports an ordering key longer than d's column holds,
// wrapped in transport.ErrInvalidMessage.
func checkOrderingKey(d Dialect, uuid, key string) error {
	lm, ok := d.(Limiter)
	if !ok {
		return nil
	}
	l := lm.Limits()
	if n := l.length(key); l.OrderingKey > 0 && n > l.OrderingKey {
		return fmt.Errorf("%w: message %.40q: ordering key (metadata %s) is %d characters, at most %d on %s",
			transport.ErrInvalidMessage, uuid, transport.MetadataOrderingKey, n, l.OrderingKey, d.Name())
	}
	return nil
}

// messageSizeLimit reports a MaxMessageSize over d's MessageSize limit.
func messageSizeLimit(d Dialect, size int) error {
	lm, ok := d.(Limiter)
	if !ok {
		return nil
	}
	if l := lm.Limits(); l.MessageSize > 0 && size > l.MessageSize {
		return fmt.Errorf("MaxMessageSize: at most %d bytes on %s, got %d", l.MessageSize, d.Name(), size)
	}
	return nil
}
