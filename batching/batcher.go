package batching

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// BatchFunc handles one batch. It returns nil to ack every member, a
// *PartialError to nack the members it names and ack the others, or any
// other error to nack the whole batch. ctx is cancelled only when a
// shutdown is forced (Handler.Close's context, Consume's FlushTimeout).
//
// msgs must not be retained after BatchFunc returns, and its members must
// not be acked or nacked by the BatchFunc: the batcher does that.
type BatchFunc func(ctx context.Context, msgs []*message.Message) error

// member is one message in a batch. Its outcome is delivered and its pending
// count settled exactly once, by finish.
type member struct {
	msg     *message.Message
	settle  func()          // from receiver.JoinBatch
	deliver func(err error) // acks/nacks; nil: the outcome goes to err and waited
	stop    func() bool     // stops the discard hook (from receiver.JoinBatch)
	batch   *batch          // guarded by batcher.mu
	done    atomic.Bool

	// Without deliver, Handle waits on waited and then reads err.
	waited sync.WaitGroup
	err    error
}

func (m *member) finish(err error) {
	if !m.done.CompareAndSwap(false, true) {
		return
	}
	// Settle first: whoever sees the outcome sees the count already
	// settled.
	m.settle()
	if m.deliver != nil {
		m.deliver(err)
		return
	}
	m.err = err
	m.waited.Done()
}

// wait waits for the outcome of a member added without deliver.
func (m *member) wait() error {
	m.waited.Wait()
	return m.err
}

// batch is one open or sealed batch. Its fields are guarded by batcher.mu.
type batch struct {
	key     string
	members []*member
	sealed  bool          // no member joins or leaves any more
	flush   chan struct{} // closed when sealed
}

// batcher is the engine behind Handler and Consume. Each open batch has one
// goroutine, started with the batch's first member and owned by the
// batcher's WaitGroup, that waits for the batch to fill, time out or be
// flushed by close, then runs the BatchFunc and settles every member.
type batcher struct {
	cfg         Config
	fn          BatchFunc
	logFailures bool

	ctx    context.Context // the BatchFunc's context; cancelled to force
	cancel context.CancelFunc
	slots  chan struct{}

	mu     sync.Mutex
	open   map[string]*batch
	closed bool

	wg        sync.WaitGroup
	closeOnce sync.Once
	stopped   chan struct{}
}

func newBatcher(base context.Context, cfg Config, fn BatchFunc) (*batcher, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: batch func is nil", transport.ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	ctx, cancel := context.WithCancel(context.WithoutCancel(base))
	return &batcher{
		cfg:     cfg,
		fn:      fn,
		ctx:     ctx,
		cancel:  cancel,
		slots:   make(chan struct{}, cfg.Concurrency),
		open:    make(map[string]*batch),
		stopped: make(chan struct{}),
	}, nil
}

// add puts msg into its open batch. deliver receives the member's outcome
// exactly once; with a nil deliver, the returned member's wait returns it.
// add returns transport.ErrClosed after close.
func (b *batcher) add(msg *message.Message, deliver func(error)) (*member, error) {
	key, err := b.key(msg)
	if err != nil {
		return nil, err
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, transport.ErrClosed
	}
	m := &member{msg: msg, deliver: deliver}
	if deliver == nil {
		m.waited.Add(1)
	}
	// drop runs at once (in its own goroutine) if the context is already
	// done; b.mu, held until m is in its batch, orders it after this.
	m.settle, m.stop = receiver.JoinBatch(msg, func() { b.discard(m) })
	bt := b.open[key]
	if bt == nil {
		bt = &batch{key: key, flush: make(chan struct{}), members: make([]*member, 0, min(b.cfg.MaxSize, 64))}
		b.open[key] = bt
		b.wg.Add(1)
		go b.run(bt)
	}
	m.batch = bt
	bt.members = append(bt.members, m)
	if len(bt.members) >= b.cfg.MaxSize {
		b.seal(bt)
	}
	return m, nil
}

func (b *batcher) key(msg *message.Message) (key string, err error) {
	if b.cfg.Key == nil {
		return "", nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("batching: key func panicked: %v", r)
		}
	}()
	return b.cfg.Key(msg), nil
}

// seal closes bt to new members and wakes its goroutine. b.mu is held.
func (b *batcher) seal(bt *batch) {
	if bt.sealed {
		return
	}
	bt.sealed = true
	if b.open[bt.key] == bt {
		delete(b.open, bt.key)
	}
	close(bt.flush)
}

// take seals bt and returns its members, whose discard hooks are stopped.
// b.mu is held.
func (b *batcher) take(bt *batch) []*member {
	b.seal(bt)
	ms := bt.members
	bt.members = nil
	for _, m := range ms {
		m.stop()
	}
	return ms
}

// discard removes m from its batch if the batch is still open: m's message
// context is done, so nobody waits for its outcome any more.
func (b *batcher) discard(m *member) {
	b.mu.Lock()
	bt := m.batch
	if bt.sealed {
		b.mu.Unlock()
		return
	}
	for i, x := range bt.members {
		if x == m {
			bt.members = append(bt.members[:i], bt.members[i+1:]...)
			break
		}
	}
	b.mu.Unlock()
	m.finish(fmt.Errorf("%w: %w", ErrDiscarded, context.Cause(m.msg.Context())))
}

// run is the goroutine of one batch.
func (b *batcher) run(bt *batch) {
	defer b.wg.Done()
	select {
	case <-bt.flush:
	case <-b.cfg.Clock.After(b.cfg.MaxWait):
	}
	b.mu.Lock()
	ms := b.take(bt)
	b.mu.Unlock()
	if len(ms) == 0 {
		return
	}

	select {
	case b.slots <- struct{}{}:
		defer func() { <-b.slots }()
	case <-b.ctx.Done():
	}
	if err := b.ctx.Err(); err != nil {
		// Forced shutdown before the batch could run: nobody handled it,
		// so nacking it cannot cause a double delivery.
		finishAll(ms, fmt.Errorf("batching: not handled: %w", transport.ErrClosed))
		return
	}

	msgs := make([]*message.Message, len(ms))
	for i, m := range ms {
		msgs[i] = m.msg
	}
	err := b.call(msgs)
	clear(msgs)
	b.settle(ms, err)
}

// call runs the BatchFunc, turning a panic into an error that it logs.
func (b *batcher) call(msgs []*message.Message) error {
	err, panicked := callBatchFunc(b.fn, b.ctx, msgs)
	if panicked {
		guard.Do(func() { b.cfg.Logger.Error("Batch func panicked", err, watermill.LogFields{"batch_size": len(msgs)}) })
	}
	return err
}

// callBatchFunc calls fn, turning a panic into an error.
func callBatchFunc(fn BatchFunc, ctx context.Context, msgs []*message.Message) (err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			err, panicked = fmt.Errorf("batching: batch func panicked: %v", r), true
		}
	}()
	return fn(ctx, msgs), false
}

// settle delivers the batch's outcome to every member.
func (b *batcher) settle(ms []*member, err error) {
	if err == nil {
		finishAll(ms, nil)
		return
	}
	var pe *PartialError
	if errors.As(err, &pe) && pe != nil && validIndexes(pe, len(ms)) {
		if b.logFailures && len(pe.Failed) > 0 {
			guard.Do(func() {
				b.cfg.Logger.Error("Batch members failed", err, watermill.LogFields{"batch_size": len(ms), "failed": len(pe.Failed)})
			})
		}
		for i, m := range ms {
			cause, failed := pe.Failed[i]
			switch {
			case !failed:
				m.finish(nil)
			case cause == nil:
				m.finish(fmt.Errorf("batching: member %d: %w", i, ErrMemberFailed))
			default:
				m.finish(fmt.Errorf("batching: member %d: %w", i, cause))
			}
		}
		return
	}
	if b.logFailures {
		guard.Do(func() { b.cfg.Logger.Error("Batch failed", err, watermill.LogFields{"batch_size": len(ms)}) })
	}
	finishAll(ms, fmt.Errorf("batching: batch of %d failed: %w", len(ms), err))
}

func validIndexes(pe *PartialError, n int) bool {
	for i := range pe.Failed {
		if i < 0 || i >= n {
			return false
		}
	}
	return true
}

func finishAll(ms []*member, err error) {
	for _, m := range ms {
		m.finish(err)
	}
}

// close stops accepting members, flushes (or, with NackOnClose, nacks) the
// open batches and waits for every batch goroutine. When ctx is done first,
// the BatchFunc's context is cancelled and batches still waiting for a slot
// are nacked; close still waits for running BatchFuncs to return, and then
// returns ctx's error.
func (b *batcher) close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		var nack []*member
		b.mu.Lock()
		b.closed = true
		for _, bt := range b.open {
			if b.cfg.NackOnClose {
				nack = append(nack, b.take(bt)...)
			} else {
				b.seal(bt)
			}
		}
		b.mu.Unlock()
		finishAll(nack, fmt.Errorf("batching: nacked on close: %w", transport.ErrClosed))
		go func() {
			b.wg.Wait()
			b.cancel()
			close(b.stopped)
		}()
	})
	select {
	case <-b.stopped:
		return nil
	case <-ctx.Done():
		b.cancel()
		<-b.stopped
		return fmt.Errorf("batching: close: %w", ctx.Err())
	}
}
