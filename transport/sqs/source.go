package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/coalesce"
	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/transport"
)

// Source is the receive side of one SQS queue, driven by the shared
// pipeline: Claim is one ReceiveMessage long poll, acks and nacks are
// coalesced into DeleteMessageBatch and ChangeMessageVisibilityBatch
// requests, and Renew is the visibility heartbeat. Subscriber opens one per
// Subscribe call; it is exported for tools and tests that drive a queue
// directly.
type Source struct {
	api    API
	q      *queue
	dlq    *queue // nil: leave dead letters to the queue's redrive policy
	logger watermill.LoggerAdapter
	codec  Codec
	// recreate, when set, creates the queue again after it went missing.
	recreate func(ctx context.Context) error

	wait       int32         // long-poll seconds
	visibility int32         // seconds asked on receive and renew
	visDur     time.Duration // visibility as a duration
	attempts   int

	deletes *coalesce.Coalescer[string]
	changes *coalesce.Coalescer[visibility]

	ctx    context.Context // for long polls; cancelled only for one that outlives its wait
	cancel context.CancelFunc

	mu       sync.Mutex // orders the start of a poll against Close
	closing  bool
	polls    sync.WaitGroup // long polls, including those whose Claim gave up on them
	lastPoll atomic.Int64   // when the latest long poll started, Unix ns
	waitDur  time.Duration  // wait as a duration

	closeOnce sync.Once
	closeErr  error
}

var (
	_ transport.Source     = (*Source)(nil)
	_ transport.Renewer    = (*Source)(nil)
	_ transport.ClaimSizer = (*Source)(nil)
	_ transport.Pinger     = (*Source)(nil)
	_ transport.LongPoller = (*Source)(nil)
)

// pollSlack is how long past its wait a long poll may take before it is
// given up (the broker froze, or the network lost it): the receive loop
// sees an error and claims again. A second longer than closeGrace, so that
// Close, which waits closeGrace past the wait, cancels a hung poll itself
// and says so.
const pollSlack = closeGrace + time.Second

// Ping implements transport.Pinger: one GetQueueAttributes call for the
// queue's ARN. A missing queue still answered: that is the claims' to
// report.
func (s *Source) Ping(ctx context.Context) error {
	_, err := s.api.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(s.q.url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil && !isQueueMissing(err) {
		return fmt.Errorf("sqs: ping %s: %w", s.q.name, err)
	}
	return nil
}

// ClaimWait implements transport.LongPoller: the long-poll wait.
func (s *Source) ClaimWait() time.Duration { return s.waitDur }

// handle is a delivery's settlement token. It holds no payload.
type handle struct {
	receipt  string
	groupID  string
	dedupID  string
	received int          // ApproximateReceiveCount
	sentAt   string       // SentTimestamp, Unix ms
	deadline atomic.Int64 // visibility end as far as we know, Unix ns
}

// rawMessage is a delivery's raw payload, dropped by the pipeline after Map.
type rawMessage struct {
	body  string
	attrs map[string]types.MessageAttributeValue
}

// newSource opens the source of queue q; cfg has its defaults applied.
func newSource(api API, q, dlq *queue, cfg SubscriberConfig, logger watermill.LoggerAdapter) *Source {
	wait := int32(0)
	if cfg.WaitTime > 0 {
		wait = seconds(cfg.WaitTime, 20*time.Second)
	}
	vis := seconds(cfg.VisibilityTimeout, MaxVisibilityTimeout)
	ctx, cancel := context.WithCancel(context.Background())
	return &Source{
		ctx:        ctx,
		cancel:     cancel,
		api:        api,
		q:          q,
		dlq:        dlq,
		logger:     logger,
		codec:      cfg.Codec,
		wait:       wait,
		waitDur:    time.Duration(wait) * time.Second,
		visibility: vis,
		visDur:     time.Duration(vis) * time.Second,
		attempts:   cfg.SettleAttempts,
		// At most Concurrency callers settle at once: waiting for more
		// than that would only add the interval to every settlement.
		deletes: newBatcher(deleteSender(api, q.url), cfg.SettleInterval, cfg.SettleAttempts, cfg.Pipeline.Concurrency),
		changes: newBatcher(visibilitySender(api, q.url), cfg.SettleInterval, cfg.SettleAttempts, cfg.Pipeline.Concurrency),
	}
}

// startPoll runs poll in the background, counted in polls, unless the
// source is closing.
func (s *Source) startPoll(poll func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.lastPoll.Store(time.Now().UnixNano())
	s.polls.Go(poll)
	return true
}

// releaseReceived makes the messages of a poll whose Claim gave up on it
// visible again at once.
func (s *Source) releaseReceived(ms []types.Message) {
	if len(ms) == 0 {
		return
	}
	vs := make([]visibility, len(ms))
	for i, m := range ms {
		vs[i] = visibility{receipt: aws.ToString(m.ReceiptHandle)}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), closeGrace)
	defer cancel()
	if err := errors.Join(runBatch(ctx, vs, s.attempts, visibilitySender(s.api, s.q.url))...); err != nil {
		guard.Do(func() {
			s.logger.Error("Releasing the messages of a cancelled claim failed; they return after their visibility timeout", err, watermill.LogFields{
				"queue": s.q.name, "messages": len(ms),
			})
		})
	}
}

// MaxClaim is SQS's limit of messages per ReceiveMessage (10): the
// pipeline launches waves of concurrent Claims, one per probe.
func (s *Source) MaxClaim() int { return maxBatch }

// QueueURL returns the URL of the queue the source consumes.
func (s *Source) QueueURL() string { return s.q.url }

// Claim receives at most min(10, max) messages with one ReceiveMessage long
// poll. It returns an empty slice when the poll times out empty. When ctx
// ends first, Claim returns ctx's error at once, but the poll is not cut
// short: it runs to its end and what it received is released (visibility
// 0), since a long poll cancelled client-side may still take messages off
// the queue, invisible for the visibility timeout. After Close it returns
// transport.ErrClosed.
func (s *Source) Claim(ctx context.Context, limit int) ([]*transport.Delivery, error) {
	n := int32(min(maxBatch, max(1, limit)))
	start := time.Now()
	type result struct {
		out *awssqs.ReceiveMessageOutput
		err error
	}
	handoff := make(chan result) // to Claim while it waits
	abandoned := make(chan struct{})
	started := s.startPoll(func() {
		// The source's context, not ctx: it ends only for a poll that
		// outlived its wait (see Close), or pollSlack past the wait (the
		// broker froze, or the network lost the request: what it may have
		// received returns after the visibility timeout).
		pctx, cancel := context.WithTimeout(s.ctx, s.waitDur+pollSlack)
		defer cancel()
		out, err := s.api.ReceiveMessage(pctx, &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(s.q.url),
			MaxNumberOfMessages:         n,
			WaitTimeSeconds:             s.wait,
			VisibilityTimeout:           s.visibility,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		select {
		case handoff <- result{out, err}:
		case <-abandoned:
			if err == nil {
				s.releaseReceived(out.Messages)
			}
		}
	})
	if !started {
		return nil, transport.ErrClosed
	}
	var r result
	select {
	case r = <-handoff:
	case <-ctx.Done():
		close(abandoned)
		return nil, ctx.Err()
	}
	out, err := r.out, r.err
	if err != nil {
		if isQueueMissing(err) {
			err = fmt.Errorf("sqs: receive %s: %w: %w", s.q.name, transport.ErrQueueNotFound, err)
			if s.recreate != nil {
				if rerr := s.recreate(ctx); rerr != nil {
					err = errors.Join(err, rerr)
				} else {
					err = fmt.Errorf("%w; re-created it", err)
				}
			}
			return nil, err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("sqs: receive %s: no answer within %s: %w", s.q.name, s.waitDur+pollSlack, err)
		}
		return nil, fmt.Errorf("sqs: receive %s: %w", s.q.name, err)
	}
	deadline := start.Add(s.visDur).UnixNano()
	ds := make([]*transport.Delivery, 0, len(out.Messages))
	for _, m := range out.Messages {
		h := &handle{
			receipt: aws.ToString(m.ReceiptHandle),
			groupID: m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)],
			dedupID: m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)],
			sentAt:  m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)],
		}
		h.received, _ = strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		h.deadline.Store(deadline)
		ds = append(ds, &transport.Delivery{
			ID:      aws.ToString(m.MessageId),
			Attempt: max(1, h.received),
			Handle:  h,
			Raw:     &rawMessage{body: aws.ToString(m.Body), attrs: m.MessageAttributes},
		})
	}
	return ds, nil
}

// Map decodes the body and attributes into a Watermill message with the
// subscriber's Codec (BerthCodec: the UUID comes from AttributeUUID, or is
// the SQS message id for messages other tools sent). Metadata gets
// MetadataSQSMessageID, MetadataReceiveCount, MetadataSentTimestamp and, on
// FIFO queues, MetadataGroupID and MetadataDeduplicationID. Undecodable
// attributes or body are an error wrapping ErrUndecodable.
func (s *Source) Map(d *transport.Delivery) (*message.Message, error) {
	raw, ok := d.Raw.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("%w: delivery %s has no raw message", ErrUndecodable, d.ID)
	}
	h := d.Handle.(*handle)
	msg, err := unmarshal(s.codec, d.ID, raw)
	if err != nil {
		return nil, err
	}
	msg.Metadata[MetadataSQSMessageID] = d.ID
	msg.Metadata[MetadataReceiveCount] = strconv.Itoa(h.received)
	if h.sentAt != "" {
		msg.Metadata[MetadataSentTimestamp] = h.sentAt
	}
	if h.groupID != "" {
		msg.Metadata[MetadataGroupID] = h.groupID
	}
	if h.dedupID != "" {
		msg.Metadata[MetadataDeduplicationID] = h.dedupID
	}
	return msg, nil
}

// Begin costs no request while the visibility left outlasts the next
// heartbeat (RenewInterval plus a tenth of the timeout): the receipt handle
// is the lease. Otherwise (the message sat in the buffer) it extends the
// visibility first. Once the visibility has expired it returns
// transport.ErrLeaseLost, since the message may already be in another
// consumer's hands (SQS may accept a stale receipt handle without effect,
// so it is not asked).
func (s *Source) Begin(ctx context.Context, d *transport.Delivery) error {
	h := d.Handle.(*handle)
	now := time.Now()
	if !s.needsExtension(h, now) {
		return nil
	}
	if !now.Before(time.Unix(0, h.deadline.Load())) {
		return fmt.Errorf("sqs: message %s: visibility expired before processing: %w", d.ID, transport.ErrLeaseLost)
	}
	if err := s.changes.Do(ctx, visibility{receipt: h.receipt, timeout: s.visibility}); err != nil {
		return fmt.Errorf("sqs: extend visibility of %s: %w", d.ID, settleErr(err))
	}
	h.deadline.Store(now.Add(s.visDur).UnixNano())
	return nil
}

// needsExtension reports whether h's visibility may end before the next
// heartbeat reaches it.
func (s *Source) needsExtension(h *handle, now time.Time) bool {
	return time.Unix(0, h.deadline.Load()).Sub(now) < s.RenewInterval()+s.visDur/10
}

// Complete deletes the message, coalesced with other acks into
// DeleteMessageBatch requests.
func (s *Source) Complete(ctx context.Context, d *transport.Delivery) error {
	h := d.Handle.(*handle)
	if err := s.deletes.Do(ctx, h.receipt); err != nil {
		return fmt.Errorf("sqs: delete %s: %w", d.ID, settleErr(err))
	}
	return nil
}

// Retry sets the message's visibility timeout to delay (rounded up to
// seconds, at most 12h), coalesced into ChangeMessageVisibilityBatch
// requests; SQS redelivers it then with ApproximateReceiveCount + 1. It
// cannot change a message it redelivers, so the reason is not kept
// (no transport.MetadataAttemptErrors).
func (s *Source) Retry(ctx context.Context, d *transport.Delivery, delay time.Duration, _ string) error {
	h := d.Handle.(*handle)
	if err := s.changes.Do(ctx, visibility{receipt: h.receipt, timeout: seconds(delay, MaxVisibilityTimeout)}); err != nil {
		return fmt.Errorf("sqs: retry %s: %w", d.ID, settleErr(err))
	}
	return nil
}

// Release makes the messages visible at once (visibility 0), in batch
// requests, so other consumers get them without waiting for the timeout.
// SQS still counts the receive in ApproximateReceiveCount.
func (s *Source) Release(ctx context.Context, ds []*transport.Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	vs := make([]visibility, len(ds))
	for i, d := range ds {
		vs[i] = visibility{receipt: d.Handle.(*handle).receipt}
	}
	errs := runBatch(ctx, vs, s.attempts, visibilitySender(s.api, s.q.url))
	return joinEntryErrors("release", ds, errs)
}

// RenewInterval is 70% of the visibility timeout.
func (s *Source) RenewInterval() time.Duration { return s.visDur * 7 / 10 }

// Renew extends the visibility of those of ds whose visibility may end
// before the next heartbeat (the others cost nothing), in
// ChangeMessageVisibilityBatch requests. A delivery whose visibility already
// expired, or whose receipt handle SQS rejects, is reported with an error
// wrapping transport.ErrLeaseLost (joined with the others).
func (s *Source) Renew(ctx context.Context, ds []*transport.Delivery) error {
	now := time.Now()
	var (
		live []*transport.Delivery
		errs []error
	)
	for _, d := range ds {
		h := d.Handle.(*handle)
		switch {
		case !now.Before(time.Unix(0, h.deadline.Load())):
			errs = append(errs, fmt.Errorf("sqs: renew %s: visibility expired: %w", d.ID, transport.ErrLeaseLost))
		case s.needsExtension(h, now):
			live = append(live, d)
		}
	}
	if len(live) > 0 {
		vs := make([]visibility, len(live))
		for i, d := range live {
			vs[i] = visibility{receipt: d.Handle.(*handle).receipt, timeout: s.visibility}
		}
		res := runBatch(ctx, vs, s.attempts, visibilitySender(s.api, s.q.url))
		deadline := now.Add(s.visDur).UnixNano()
		for i, d := range live {
			if res[i] == nil {
				d.Handle.(*handle).deadline.Store(deadline)
			}
		}
		if err := joinEntryErrors("renew", live, res); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DeadLetter sends the message to the dead-letter queue, encoded with the
// subscriber's Codec (in Berth's format if the codec cannot encode it), with
// AttributeDeadLetter holding the reason, then deletes it. Without a
// dead-letter queue it makes the message visible again and leaves it to the
// queue's redrive policy (maxReceiveCount); a queue without one redelivers
// it until its retention period ends.
func (s *Source) DeadLetter(ctx context.Context, d *transport.Delivery, msg *message.Message, reason string) error {
	h := d.Handle.(*handle)
	if s.dlq == nil {
		guard.Do(func() {
			s.logger.Debug("Dead letter left to the queue's redrive policy", watermill.LogFields{
				"queue": s.q.name, "sqs_message_id": d.ID, "reason": reason,
			})
		})
		if err := s.changes.Do(ctx, visibility{receipt: h.receipt}); err != nil {
			return fmt.Errorf("sqs: dead-letter %s: release to redrive policy: %w", d.ID, settleErr(err))
		}
		return nil
	}
	info := map[string]any{
		"reason":        reason,
		"queue":         s.q.name,
		"message_id":    d.ID,
		"receive_count": h.received,
	}
	var (
		body  string
		attrs map[string]types.MessageAttributeValue
	)
	if msg != nil {
		var notes map[string]any
		var err error
		body, attrs, notes, err = deadLetterCopy(s.codec, msg)
		if err != nil {
			return fmt.Errorf("sqs: dead-letter %s: %w", d.ID, err)
		}
		maps.Copy(info, notes)
	} else if raw, ok := d.Raw.(*rawMessage); ok {
		body = raw.body
		attrs = make(map[string]types.MessageAttributeValue, MaxAttributes)
		names := slices.Sorted(maps.Keys(raw.attrs))
		var overflow []string
		for _, n := range names {
			if len(attrs) < MaxAttributes-1 && n != AttributeDeadLetter {
				attrs[n] = raw.attrs[n]
			} else {
				overflow = append(overflow, n)
			}
		}
		if len(overflow) > 0 {
			info["dropped_attributes"] = overflow
		}
	}
	b, _ := json.Marshal(info)
	attrs[AttributeDeadLetter] = strAttr(string(b))
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(s.dlq.url), MessageBody: aws.String(body), MessageAttributes: attrs}
	if s.dlq.fifo {
		g := h.groupID
		if g == "" {
			g = "berth-dead-letter"
		}
		in.MessageGroupId = aws.String(g)
		in.MessageDeduplicationId = aws.String(d.ID)
	}
	if _, err := s.api.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("sqs: dead-letter %s: send to %s: %w", d.ID, s.dlq.name, err)
	}
	if err := s.deletes.Do(ctx, h.receipt); err != nil {
		return fmt.Errorf("sqs: dead-letter %s: delete: %w", d.ID, settleErr(err))
	}
	return nil
}

// Close stops new long polls, flushes the waiting acks and nacks (until
// ctx is done), and waits for the long polls still out, which release what
// they receive at once. A long poll is not cut short even when ctx ends
// first: cancelled client-side, it could still take messages off the queue
// and hide them for the visibility timeout. It ends by itself within
// WaitTime; only one that outlives that by closeGrace (a hung connection)
// is cancelled, and reported. Messages still in flight are left to their
// visibility timeout. Close is idempotent.
func (s *Source) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		// The final flush runs on the coalescers' own context; ctx bounds the
		// wait, with a short grace when it is already done.
		wctx := ctx
		if ctx.Err() != nil {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), closeGrace)
			defer cancel()
		}
		errs := []error{s.deletes.Close(wctx), s.changes.Close(wctx)}
		errs = append(errs, s.waitPolls())
		s.cancel()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// waitPolls waits for the long polls still out, until the latest one's wait
// has passed by closeGrace; then it cancels them.
func (s *Source) waitPolls() error {
	done := make(chan struct{})
	go func() {
		s.polls.Wait()
		close(done)
	}()
	last := s.lastPoll.Load()
	if last == 0 { // no poll ever started, and none will
		<-done
		return nil
	}
	t := time.NewTimer(time.Until(time.Unix(0, last).Add(s.waitDur + closeGrace)))
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		s.cancel()
		<-done
		return fmt.Errorf("sqs: close %s: a long poll was still out %s after its %s wait; cancelled (what it took returns after the visibility timeout)",
			s.q.name, closeGrace, s.waitDur)
	}
}

// closeGrace bounds the final flush when Close gets a context already done,
// the release of a cancelled claim's messages, and how long past its wait
// Close waits for a long poll.
const closeGrace = 5 * time.Second

func joinEntryErrors(op string, ds []*transport.Delivery, errs []error) error {
	var out []error
	for i, err := range errs {
		if err != nil {
			out = append(out, fmt.Errorf("sqs: %s %s: %w", op, ds[i].ID, err))
		}
	}
	return errors.Join(out...)
}
