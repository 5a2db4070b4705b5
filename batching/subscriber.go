package batching

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// ErrBatchNacked is the outcome of the members of a batch that a router
// nacked although the last call of its BatchFunc had not failed them: a
// middleware failed it, or it was nacked before the BatchFunc ran.
var ErrBatchNacked = errors.New("batching: batch nacked")

// A Subscriber hands a Watermill router whole batches instead of single
// messages. It wraps a message.Subscriber (a Berth subscriber, to have the
// batches counted by their listeners), groups the messages of each
// subscription into batches as Consume does, and delivers each batch as one
// message, which HandlerFunc unpacks:
//
//	sub, err := batching.NewSubscriber(berthSub, batching.Config{MaxSize: 50})
//	...
//	router.AddConsumerHandler("rows", "rows", sub, batching.HandlerFunc(insertRows))
//
// The router runs one handler call (and one goroutine) per batch rather than
// per message, so a held member costs what it costs under Consume; with
// Handler, each held member also keeps a router goroutine (see the package
// documentation).
//
// The batch message has a fresh UUID, no payload and no metadata; its
// context carries the batch and the router's handler values. Router
// middleware wraps the batch, not its members: a Timeout middleware bounds
// the BatchFunc's call; a Retry middleware calls it again with the members
// that failed (after a *PartialError, only those; after any other error, all
// of them), and members that succeeded are acked when the batch ends. When
// the router acks the batch message, every member is acked. When it nacks
// it, the members that failed in the last call are nacked with their own
// errors and the others acked; if the last call failed none (a middleware
// failed the batch after it, or the BatchFunc never ran), all are nacked
// with ErrBatchNacked. So nothing is acked
// that the handler did not succeed on or the router did not ack. Middleware
// that republishes the message itself (a poison queue) sees an empty
// payload; a Berth subscriber dead-letters members by their own attempts.
//
// Close (which the router calls when it closes) stops reading, hands every
// open batch to the router at once (or nacks its members, with
// Config.NackOnClose), waits up to Config.FlushTimeout for the router to
// ack or nack the batches it was given, then closes the wrapped subscriber.
// A batch the router has not settled by then is given up on: its members
// are nacked, and the context of its BatchFunc call is cancelled.
//
// Router.Close starts Close but can return before it has: call Close
// after Router.Close to wait until the wrapped subscriber has settled every
// member at the broker (Close is idempotent; a second call waits for the
// first).
type Subscriber struct {
	sub message.Subscriber
	cfg Config

	mu      sync.Mutex
	closed  bool
	cancels []context.CancelFunc

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// NewSubscriber returns a Subscriber batching the messages of sub. It
// reports an invalid cfg or a nil sub as transport.ErrInvalidConfig. The
// Subscriber owns sub: its Close closes sub.
func NewSubscriber(sub message.Subscriber, cfg Config) (*Subscriber, error) {
	if sub == nil {
		return nil, fmt.Errorf("%w: batching: subscriber is nil", transport.ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Subscriber{sub: sub, cfg: cfg.WithDefaults()}, nil
}

// Subscribe subscribes the wrapped subscriber to topic and returns a channel
// of batch messages, one per batch, to be handled by HandlerFunc. Each call
// batches its own subscription. The channel is closed after ctx is done or
// Close was called, once the open batches have ended.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, transport.ErrClosed
	}
	// The wrapped subscription gets ctx itself, not a context Close
	// cancels: the members of the last batches stay live until those
	// batches end, and then Close closes the wrapped subscriber.
	out := make(chan *message.Message)
	b, err := newBatcher(ctx, s.cfg, deliverBatches(out))
	if err != nil {
		return nil, err
	}
	in, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		b.cancel()
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	s.cancels = append(s.cancels, cancel)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		// consume returns once every batch has ended, so nothing sends on
		// out after it.
		_ = b.consume(rctx, in)
		close(out)
	}()
	return out, nil
}

// SubscribeInitialize initializes topic on the wrapped subscriber, if it is
// a message.SubscribeInitializer.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if si, ok := s.sub.(message.SubscribeInitializer); ok {
		return si.SubscribeInitialize(topic)
	}
	return nil
}

// ListenerStates returns the wrapped subscriber's listener states, if it
// reports them (a Berth subscriber does), so the Subscriber can be given to
// package health in its place; nil otherwise.
func (s *Subscriber) ListenerStates() []transport.ListenerState {
	if ls, ok := s.sub.(transport.StateSource); ok {
		return ls.ListenerStates()
	}
	return nil
}

// Close ends every subscription (see Subscriber) and closes the wrapped
// subscriber. It is idempotent, safe to call concurrently, and returns when
// everything has stopped.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		cancels := s.cancels
		s.cancels = nil
		s.mu.Unlock()
		for _, cancel := range cancels {
			cancel()
		}
		s.wg.Wait()
		s.closeErr = s.sub.Close()
	})
	return s.closeErr
}

// HandlerFunc adapts fn to a router handler for the batch messages of a
// Subscriber: it calls fn with the batch's members still to handle and
// returns its error, so the router acks or nacks the batch (see
// Subscriber). fn's context is the batch message's, with whatever the
// router and its middleware put in it. A panic in fn is returned as an
// error. A message that is not a batch (the subscriber is not a
// batching.Subscriber) is handled as a batch of one.
func HandlerFunc(fn BatchFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		e, _ := msg.Context().Value(batchKey{}).(*batchMessage)
		if e == nil {
			err, _ := callBatchFunc(fn, msg.Context(), []*message.Message{msg})
			return err
		}
		msgs, err := e.begin()
		if err != nil {
			return err
		}
		err, _ = callBatchFunc(fn, msg.Context(), msgs)
		clear(msgs)
		return e.record(err)
	}
}

type batchKey struct{}

// batchMessage is what a batch message's context carries: the batch as the
// batcher gave it, and which members are still to be handled.
type batchMessage struct {
	mu      sync.Mutex
	members []*message.Message // as given to the batcher's BatchFunc
	pending []int              // indexes into members still to handle
	failed  map[int]error      // the last call's error per pending member; nil before any failure
	whole   error              // the last call's error when it failed all of pending
	ended   bool               // the batcher's BatchFunc has returned
}

// deliverBatches is the batcher's BatchFunc of a Subscriber: it sends the
// batch to out as one message and returns the outcome the router gives it.
func deliverBatches(out chan<- *message.Message) BatchFunc {
	return func(ctx context.Context, msgs []*message.Message) error {
		e := &batchMessage{members: msgs, pending: make([]int, len(msgs))}
		for i := range e.pending {
			e.pending[i] = i
		}
		defer e.end()
		msg := message.NewMessage(watermill.NewUUID(), nil)
		msg.SetContext(context.WithValue(ctx, batchKey{}, e))
		// ctx is done only when a shutdown is forced; then the batch is
		// given up on and its members nacked for redelivery.
		select {
		case out <- msg:
		case <-ctx.Done():
			return fmt.Errorf("batching: batch not delivered: %w", transport.ErrClosed)
		}
		select {
		case <-msg.Acked():
			return nil
		case <-msg.Nacked():
			return e.failure()
		case <-ctx.Done():
			return fmt.Errorf("batching: batch not settled by the router before shutdown: %w", transport.ErrClosed)
		}
	}
}

// begin returns the members still to handle.
func (e *batchMessage) begin() ([]*message.Message, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return nil, fmt.Errorf("batching: batch already ended: %w", transport.ErrClosed)
	}
	msgs := make([]*message.Message, len(e.pending))
	for i, j := range e.pending {
		msgs[i] = e.members[j]
	}
	return msgs, nil
}

// record keeps the outcome of one call of the BatchFunc and returns err.
func (e *batchMessage) record(err error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return err
	}
	if err == nil {
		e.pending, e.failed, e.whole = nil, nil, nil
		return nil
	}
	var pe *PartialError
	if errors.As(err, &pe) && pe != nil && validIndexes(pe, len(e.pending)) {
		idx := make([]int, 0, len(pe.Failed))
		for i := range pe.Failed {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		failed := make(map[int]error, len(idx))
		pending := make([]int, len(idx))
		for n, i := range idx {
			pending[n] = e.pending[i]
			failed[pending[n]] = pe.Failed[i]
		}
		e.pending, e.failed, e.whole = pending, failed, nil
		return err
	}
	e.failed = make(map[int]error, len(e.pending))
	for _, i := range e.pending {
		e.failed[i] = err
	}
	e.whole = err
	return err
}

// failure is the batcher's outcome of a nacked batch: the members that
// failed in the last call fail, the others succeed.
func (e *batchMessage) failure() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.failed == nil:
		return ErrBatchNacked
	case e.whole != nil && len(e.pending) == len(e.members):
		return e.whole
	}
	return &PartialError{Failed: e.failed}
}

// end marks the batch ended: the batcher is about to settle and forget
// its members.
func (e *batchMessage) end() {
	e.mu.Lock()
	e.ended = true
	e.members, e.pending, e.failed = nil, nil, nil
	e.mu.Unlock()
}
