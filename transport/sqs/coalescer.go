package sqs

import (
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/berth-go/berth/transport"
)

// publishOne sends the single message of a Publish call to q: in a shared
// batch request with PublishLinger, else with one SendMessage.
func (p *Publisher) publishOne(topic string, q *queue, m *message.Message) error {
	o, err := p.prepareOne(topic, m, q.maxSize, q.fifo, true)
	if err != nil {
		return err
	}
	if p.cfg.PublishLinger > 0 {
		c := p.coalescers.get("sqs "+q.url, func() *coalescer {
			return newCoalescer(p.sendQueue(q), p.cfg.PublishLinger, p.cfg.MaxBatchBytes, p.cfg.PublishConcurrency, p.cfg.SendAttempts)
		})
		if err := c.do(o); err != nil {
			return fmt.Errorf("sqs: publish %s to %s: %w", m.UUID, q.name, err)
		}
		return nil
	}
	in := &awssqs.SendMessageInput{
		QueueUrl:          aws.String(q.url),
		MessageBody:       aws.String(o.e.body),
		MessageAttributes: o.e.attrs,
		DelaySeconds:      o.delay,
	}
	if o.group != "" {
		in.MessageGroupId = aws.String(o.group)
		in.MessageDeduplicationId = aws.String(o.dedup)
	}
	if _, err := p.api.SendMessage(m.Context(), in); err != nil {
		if isQueueMissing(err) {
			p.queues.forget(q.name)
			err = fmt.Errorf("%w: %w", transport.ErrQueueNotFound, err)
		}
		return fmt.Errorf("sqs: publish %s to %s: SendMessage: %w", m.UUID, q.name, err)
	}
	return nil
}

// publishTopicOne sends the single message of a Publish call to the SNS
// topic topicARN in a shared PublishBatch request (PublishLinger).
func (p *Publisher) publishTopicOne(topic, name, topicARN string, m *message.Message) error {
	o, err := p.prepareOne(topic, m, maxSNSBytes, p.cfg.Queue.FIFO, false)
	if err != nil {
		return err
	}
	c := p.coalescers.get("sns "+topicARN, func() *coalescer {
		return newCoalescer(p.sendTopic(topicARN), p.cfg.PublishLinger, min(p.cfg.MaxBatchBytes, maxSNSBytes), p.cfg.PublishConcurrency, p.cfg.SendAttempts)
	})
	if err := c.do(o); err != nil {
		return fmt.Errorf("sqs: publish %s to %s: %w", m.UUID, name, err)
	}
	return nil
}

// coalescers holds a publisher's coalescer per destination.
type coalescers struct {
	mu sync.Mutex
	m  map[string]*coalescer
}

// get returns the coalescer of key, made by create on first use.
func (cs *coalescers) get(key string, create func() *coalescer) *coalescer {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c, ok := cs.m[key]
	if !ok {
		if cs.m == nil {
			cs.m = map[string]*coalescer{}
		}
		c = create()
		cs.m[key] = c
	}
	return c
}

func (cs *coalescers) all() []*coalescer {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	all := make([]*coalescer, 0, len(cs.m))
	for _, c := range cs.m {
		all = append(all, c)
	}
	return all
}

// A coalescer gathers the single messages of concurrent Publish calls to one
// destination into shared batch requests. It follows five rules:
//
//  1. Messages queue in arrival order; a batch takes them from the head, up
//     to maxBatch messages and maxBytes.
//  2. A batch goes when it is full (maxBatch, or the next message would
//     exceed maxBytes), when its first message has waited linger, or at
//     once after flush (Close).
//  3. A batch is also full when it holds as many messages as the most calls
//     in progress at once lately (this second or the last): more callers
//     are unlikely to come, so waiting would only add latency. A lone
//     caller never waits, and a pool of n producers sends batches of n.
//  4. At most inFlight batches are in flight; a ready batch waits for one
//     to finish.
//  5. Each caller gets its own entry's outcome (entries failed on the server
//     side are sent again, up to attempts); a caller whose message context
//     ends withdraws its message if it is still queued, and a request is
//     cancelled only when the contexts of all its messages are done.
//
// Unlike internal/coalesce, which runs one flush at a time on its callers'
// goroutines, it keeps several requests in flight, so that a busy
// publisher is not held to 10 messages per round trip; and it bounds the
// bytes of a batch, as SQS does.
type coalescer struct {
	send     sendFunc[*outgoing]
	linger   time.Duration
	maxBytes int
	inFlight int
	attempts int

	mu       sync.Mutex
	queue    []*coalesced
	running  int
	flushing bool
	active   int         // calls in do
	peak     int         // most calls in do at once since window began
	lastPeak int         // the same in the window before
	window   time.Time   // when the current peak window began
	timer    *time.Timer // fires when the head of queue has waited linger
	wg       sync.WaitGroup
}

// coalesced is one queued message and where its outcome goes.
type coalesced struct {
	o    *outgoing
	at   time.Time
	done chan error // buffered 1
}

func newCoalescer(send sendFunc[*outgoing], linger time.Duration, maxBytes, inFlight, attempts int) *coalescer {
	return &coalescer{send: send, linger: linger, maxBytes: maxBytes, inFlight: max(inFlight, 1), attempts: max(attempts, 1)}
}

// do queues o and waits for its outcome, or until its message context is
// done: then it withdraws o if still queued, and returns the context's
// error either way.
func (c *coalescer) do(o *outgoing) error {
	now := time.Now()
	w := &coalesced{o: o, at: now, done: make(chan error, 1)}
	c.mu.Lock()
	c.enterLocked(now)
	c.queue = append(c.queue, w)
	c.dispatchLocked()
	c.mu.Unlock()
	ctx := o.msg.Context()
	select {
	case err := <-w.done:
		c.leave(nil)
		return err
	case <-ctx.Done():
		c.leave(w)
		return ctx.Err()
	}
}

// peakWindow is how long a peak of concurrent calls counts (rule 3): for
// this window and the next.
const peakWindow = time.Second

// enterLocked counts a call in do and keeps the peak.
func (c *coalescer) enterLocked(now time.Time) {
	c.active++
	if since := now.Sub(c.window); since >= peakWindow {
		c.lastPeak = c.peak
		if since >= 2*peakWindow {
			c.lastPeak = 0
		}
		c.peak, c.window = 0, now
	}
	c.peak = max(c.peak, c.active)
}

// leave counts a call out of do, withdrawing w from the queue if it is
// still there.
func (c *coalescer) leave(w *coalesced) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active--
	if w == nil {
		return
	}
	for i, q := range c.queue {
		if q == w {
			c.queue = append(c.queue[:i:i], c.queue[i+1:]...)
			return
		}
	}
}

// dispatchLocked sends the batches that are ready, while fewer than
// inFlight are in flight, and arms the timer for the next one.
func (c *coalescer) dispatchLocked() {
	for c.running < c.inFlight && len(c.queue) > 0 {
		n, full := c.nextBatchLocked()
		if !full && !c.flushing {
			if wait := c.linger - time.Since(c.queue[0].at); wait > 0 {
				c.armLocked(wait)
				return
			}
		}
		batch := make([]*coalesced, n)
		copy(batch, c.queue)
		c.queue = append(c.queue[:0:0], c.queue[n:]...)
		c.running++
		c.wg.Go(func() { c.run(batch) })
	}
}

// nextBatchLocked returns how many queued messages the next batch takes,
// and whether it is full.
func (c *coalescer) nextBatchLocked() (n int, full bool) {
	flushAt := min(maxBatch, max(c.peak, c.lastPeak, 1))
	size := 0
	for n < len(c.queue) && n < maxBatch {
		s := c.queue[n].o.e.size
		if n > 0 && size+s > c.maxBytes {
			return n, true
		}
		size += s
		n++
	}
	return n, n >= flushAt
}

// armLocked makes the timer fire after d.
func (c *coalescer) armLocked(d time.Duration) {
	if c.timer == nil {
		c.timer = time.AfterFunc(d, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.dispatchLocked()
		})
		return
	}
	c.timer.Reset(d)
}

// run sends one batch and hands each caller its outcome.
func (c *coalescer) run(batch []*coalesced) {
	outs := make([]*outgoing, len(batch))
	for i, w := range batch {
		outs[i] = w.o
	}
	ctx, cancel := allDone(outs)
	errs := runBatch(ctx, outs, c.attempts, c.send)
	cancel()
	for i, w := range batch {
		w.done <- errs[i]
	}
	c.mu.Lock()
	c.running--
	c.dispatchLocked()
	c.mu.Unlock()
}

// flush sends what is queued without lingering, from now on.
func (c *coalescer) flush() {
	c.mu.Lock()
	c.flushing = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.dispatchLocked()
	c.mu.Unlock()
}

// wait waits for the requests in flight (after flush).
func (c *coalescer) wait() { c.wg.Wait() }
