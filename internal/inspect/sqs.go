package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/pipeurl"
	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqs"
)

// SQS is one SQS deployment: a client and the dead-letter queue its URL
// names.
type SQS struct {
	Client *awssqs.Client
	// DLQ is the dead-letter queue name (URL parameter dead_letter_queue);
	// "" when none was given.
	DLQ string
	// Prefix limits Queues to queue names starting with it.
	Prefix string
	now    func() time.Time
}

// OpenSQS opens the deployment an sqs:// URL describes. Every parameter of
// the transport's URLs is accepted (so a service's URL can be pasted as
// is); only region, endpoint, secure, request_attempts and
// dead_letter_queue matter here. It checks that the endpoint answers.
func OpenSQS(ctx context.Context, rawURL string) (*SQS, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: bad URL: %w", transport.ErrInvalidConfig, err)
	}
	if u.Scheme != "sqs" {
		return nil, fmt.Errorf("%w: %q is not sqs", transport.ErrInvalidConfig, u.Scheme)
	}
	p := urlparam.New(u.Query())
	secure := p.Bool("secure", false)
	endpoint := p.String("endpoint", "")
	if u.Host != "" {
		scheme := "http"
		if secure {
			scheme = "https"
		}
		endpoint = scheme + "://" + u.Host
	}
	region := p.String("region", "")
	attempts := p.Int("request_attempts", 3, 1, 100)
	dlq := p.String("dead_letter_queue", "")
	for _, k := range []string{"create", "fifo", "content_dedup", "sns"} {
		p.Bool(k, false)
	}
	p.Int("max_message_size", 0, 1024, 1<<20)
	p.Int("max_receive_count", 0, -1, 1000)
	p.Int("publish_concurrency", 0, 1, 1024)
	p.Duration("publish_linger", 0, 0, sqs.MaxPublishLinger)
	p.Enum("codec", sqs.CodecBerth, sqs.CodecBerth, sqs.CodecWatermillAWS)
	p.String("consumer_group", "")
	p.Duration("wait_time", 0, -1, 20*time.Second)
	p.Duration("visibility_timeout", 0, time.Second, sqs.MaxVisibilityTimeout)
	p.Duration("settle_interval", 0, -1, time.Minute)
	var pc receiver.Config
	pipeurl.Parse(p, &pc)
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("%w: sqs URL: %w", transport.ErrInvalidConfig, err)
	}
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRetryMaxAttempts(attempts)}
	if region == "" && endpoint != "" {
		region = "us-east-1"
	}
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(u.User.Username(), pw, "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("sqs: load AWS configuration: %w", err)
	}
	client := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	s := &SQS{Client: client, DLQ: dlq, now: time.Now}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := client.ListQueues(pctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1)}); err != nil {
		where := endpoint
		if where == "" {
			where = "AWS region " + cfg.Region
		}
		return nil, fmt.Errorf("cannot reach SQS at %s: %w", where, err)
	}
	return s, nil
}

// Close implements Inspector; the SDK client holds nothing to close.
func (s *SQS) Close() error { return nil }

func (s *SQS) listQueues(ctx context.Context) ([]string, error) {
	var urls []string
	in := &awssqs.ListQueuesInput{MaxResults: aws.Int32(1000)}
	if s.Prefix != "" {
		in.QueueNamePrefix = aws.String(s.Prefix)
	}
	for {
		out, err := s.Client.ListQueues(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("sqs: list queues: %w", err)
		}
		urls = append(urls, out.QueueUrls...)
		if out.NextToken == nil || *out.NextToken == "" {
			return urls, nil
		}
		in.NextToken = out.NextToken
	}
}

func nameOf(queueURL string) string { return queueURL[strings.LastIndex(queueURL, "/")+1:] }

func atoi(m map[string]string, k string) int64 {
	n, _ := strconv.ParseInt(m[k], 10, 64)
	return n
}

// Queues implements Inspector: every queue (under Prefix) with its
// approximate counts and its dead-letter queue's (from its redrive policy,
// else the URL's dead_letter_queue).
func (s *SQS) Queues(ctx context.Context) ([]QueueStats, error) {
	urls, err := s.listQueues(ctx)
	if err != nil {
		return nil, err
	}
	attrs := map[string]map[string]string{}
	byArn := map[string]string{}
	for _, u := range urls {
		out, err := s.Client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
			QueueUrl: aws.String(u), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
		})
		if err != nil {
			return nil, fmt.Errorf("sqs: attributes of %s: %w", nameOf(u), err)
		}
		attrs[nameOf(u)] = out.Attributes
		byArn[out.Attributes["QueueArn"]] = nameOf(u)
	}
	var res []QueueStats
	listed := make([]string, 0, len(attrs))
	for name := range attrs {
		listed = append(listed, name)
	}
	for _, name := range listed {
		a := attrs[name]
		st := QueueStats{
			Queue:    name,
			Ready:    atoi(a, "ApproximateNumberOfMessages"),
			InFlight: atoi(a, "ApproximateNumberOfMessagesNotVisible"),
			Delayed:  atoi(a, "ApproximateNumberOfMessagesDelayed"),
		}
		dlq := ""
		if rp := a["RedrivePolicy"]; rp != "" {
			var p struct {
				DeadLetterTargetArn string `json:"deadLetterTargetArn"`
			}
			if json.Unmarshal([]byte(rp), &p) == nil {
				dlq = byArn[p.DeadLetterTargetArn]
				if dlq == "" {
					dlq = p.DeadLetterTargetArn[strings.LastIndex(p.DeadLetterTargetArn, ":")+1:]
				}
			}
		}
		if dlq == "" && s.DLQ != "" && name != s.DLQ {
			dlq = s.DLQ
		}
		if dlq != "" {
			st.DeadLetterQueue = dlq
			da, ok := attrs[dlq]
			if !ok {
				// A dead-letter queue outside the listing (another
				// prefix): read its counts on their own, once.
				da = s.dlqAttributes(ctx, dlq)
				attrs[dlq] = da
			}
			st.DeadLettered = atoi(da, "ApproximateNumberOfMessages") + atoi(da, "ApproximateNumberOfMessagesNotVisible")
		}
		res = append(res, st)
	}
	sort.Slice(res, func(i, j int) bool { return res[i].Queue < res[j].Queue })
	return res, nil
}

// dlqAttributes returns the attributes of the dead-letter queue name, or
// nil when it cannot be read (it does not exist yet, say): its count is
// then 0.
func (s *SQS) dlqAttributes(ctx context.Context, name string) map[string]string {
	u, err := s.dlqURL(ctx, name)
	if err != nil {
		return nil
	}
	out, err := s.Client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(u), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible},
	})
	if err != nil {
		return nil
	}
	return out.Attributes
}

// ErrNoDLQ is returned by the dead-letter operations on SQS when the URL
// names no dead_letter_queue.
var ErrNoDLQ = errors.New("inspect: no dead-letter queue: add dead_letter_queue=NAME to the sqs URL")

func (s *SQS) dlqURL(ctx context.Context, name string) (string, error) {
	out, err := s.Client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		var nf *types.QueueDoesNotExist
		if errors.As(err, &nf) {
			return "", fmt.Errorf("%w: %s: %w", transport.ErrQueueNotFound, name, err)
		}
		return "", fmt.Errorf("sqs: queue %s: %w", name, err)
	}
	return *out.QueueUrl, nil
}

// checkQueue returns an error wrapping transport.ErrQueueNotFound when f
// selects a source queue that does not exist.
func (s *SQS) checkQueue(ctx context.Context, f Filter) error {
	if f.Queue == "" {
		return nil
	}
	_, err := s.dlqURL(ctx, f.Queue)
	return err
}

// received is one message of the dead-letter queue.
type received struct {
	DeadLetter
	queueURL string
	receipt  string
	body     string
	attrs    map[string]types.MessageAttributeValue
}

func (s *SQS) decode(m types.Message) received {
	r := received{receipt: aws.ToString(m.ReceiptHandle), body: aws.ToString(m.Body), attrs: m.MessageAttributes}
	r.ID = aws.ToString(m.MessageId)
	r.Payload = []byte(r.body)
	r.Metadata = map[string]string{}
	for k, v := range m.MessageAttributes {
		switch k {
		case sqs.AttributeUUID:
			r.UUID = aws.ToString(v.StringValue)
		case sqs.AttributeDeadLetter:
			var info struct {
				Reason       string `json:"reason"`
				Queue        string `json:"queue"`
				ReceiveCount int    `json:"receive_count"`
			}
			_ = json.Unmarshal([]byte(aws.ToString(v.StringValue)), &info)
			r.Reason, r.Queue, r.Attempts = info.Reason, info.Queue, info.ReceiveCount
		case sqs.AttributeMetadata:
			_ = json.Unmarshal([]byte(aws.ToString(v.StringValue)), &r.Metadata)
		case sqs.AttributeBodyEncoding:
		default:
			if v.StringValue != nil {
				r.Metadata[k] = *v.StringValue
			}
		}
	}
	if ts, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		r.FailedAt = time.UnixMilli(ts)
	}
	if r.UUID == "" {
		r.UUID = r.ID
	}
	return r
}

// errStop, returned by a scan callback, ends the scan after the current
// batch, whose other messages are still passed to the callback.
var errStop = errors.New("stop")

// scan receives the dead-letter queue's messages until three polls in a row
// bring nothing new, keeping each invisible for hold (at least a second:
// the SDK does not send a zero), and calls fn with each new one, and again
// with one received once more (its hold ran out during the scan): only
// its latest receipt can make it visible again.
func (s *SQS) scan(ctx context.Context, hold time.Duration, fn func(r received) error, again func(r received)) error {
	if s.DLQ == "" {
		return ErrNoDLQ
	}
	qurl, err := s.dlqURL(ctx, s.DLQ)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	idle := 0
	for idle < 3 {
		out, err := s.Client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(qurl),
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             1,
			VisibilityTimeout:           int32(hold / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			return fmt.Errorf("sqs: receive from %s: %w", s.DLQ, err)
		}
		fresh, stop := 0, false
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageId)
			if seen[id] {
				r := s.decode(m)
				r.queueURL = qurl
				again(r)
				continue
			}
			seen[id] = true
			fresh++
			r := s.decode(m)
			r.queueURL = qurl
			if err := fn(r); errors.Is(err, errStop) {
				stop = true
			} else if err != nil {
				return err
			}
		}
		if stop {
			return nil
		}
		if fresh == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	return nil
}

// DeadLetters implements Inspector: it peeks at the dead-letter queue.
// Messages are received with a short visibility timeout (SQS has no peek)
// and made visible again as soon as the listing ends.
func (s *SQS) DeadLetters(ctx context.Context, f Filter, limit int) ([]DeadLetter, error) {
	if err := s.checkQueue(ctx, f); err != nil {
		return nil, err
	}
	var out []DeadLetter
	receipts := map[string]string{} // the latest, by message id
	now := s.now()
	qurl := ""
	keep := func(r received) {
		qurl = r.queueURL
		receipts[r.ID] = r.receipt
	}
	err := s.scan(ctx, 30*time.Second, func(r received) error {
		keep(r)
		if limit > 0 && len(out) >= limit {
			return errStop
		}
		if f.Match(r.DeadLetter, now) {
			out = append(out, r.DeadLetter)
		}
		return nil
	}, keep)
	return out, errors.Join(err, s.release(ctx, qurl, receipts))
}

// release makes the received messages visible again, by their latest
// receipts (an earlier one no longer works once a message is received
// again), even when ctx is done: every one, even after a failure, since a
// message left hidden would vanish from the next listing for the rest of
// its hold.
func (s *SQS) release(ctx context.Context, qurl string, receipts map[string]string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var err error
	for _, rh := range receipts {
		if _, rerr := s.Client.ChangeMessageVisibility(rctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(qurl), ReceiptHandle: aws.String(rh), VisibilityTimeout: 0,
		}); rerr != nil {
			err = errors.Join(err, fmt.Errorf("sqs: make %s visible again: %w", s.DLQ, rerr))
		}
	}
	return err
}

// settle runs fn on the selected messages of the dead-letter queue,
// holding each received message for a minute; messages not selected are
// made visible again when the scan ends (released at once, each would be
// received again by the scan's next poll and then stay hidden for the
// minute).
func (s *SQS) settle(ctx context.Context, f Filter, dryRun bool, fn func(qurl string, r received) error) ([]DeadLetter, error) {
	if dryRun {
		return s.DeadLetters(ctx, f, 0)
	}
	if err := s.checkQueue(ctx, f); err != nil {
		return nil, err
	}
	qurl := ""
	if s.DLQ != "" {
		u, err := s.dlqURL(ctx, s.DLQ)
		if err != nil {
			return nil, err
		}
		qurl = u
	}
	now := s.now()
	var done []DeadLetter
	receipts := map[string]string{} // of the messages not selected, by id
	keep := func(r received) { receipts[r.ID] = r.receipt }
	err := s.scan(ctx, time.Minute, func(r received) error {
		if !f.Match(r.DeadLetter, now) {
			keep(r)
			return nil
		}
		if err := fn(qurl, r); err != nil {
			return err
		}
		done = append(done, r.DeadLetter)
		return nil
	}, keep)
	return done, errors.Join(err, s.release(ctx, qurl, receipts))
}

// Purge implements Inspector: it deletes the selected messages from the
// dead-letter queue.
func (s *SQS) Purge(ctx context.Context, f Filter, dryRun bool) ([]DeadLetter, error) {
	return s.settle(ctx, f, dryRun, func(qurl string, r received) error {
		_, err := s.Client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(qurl), ReceiptHandle: aws.String(r.receipt)})
		if err != nil {
			return fmt.Errorf("sqs: delete %s: %w", r.ID, err)
		}
		return nil
	})
}

// Replay implements Inspector: each selected message is sent to the queue
// named in its berth_dead_letter attribute, without that attribute (a new
// message, so its receive count starts again), then deleted from the
// dead-letter queue. A message without a source queue is left where it is
// and reported as an error.
func (s *SQS) Replay(ctx context.Context, f Filter, dryRun bool) ([]DeadLetter, error) {
	return s.replay(ctx, f, dryRun, 0)
}

// MaxSQSReplayDelay is the longest delay SQS lets a message wait.
const MaxSQSReplayDelay = 15 * time.Minute

// ReplayDelayed is Replay with each message delayed (DelaySeconds, at
// most MaxSQSReplayDelay; FIFO queues take no per-message delay).
func (s *SQS) ReplayDelayed(ctx context.Context, f Filter, delay time.Duration) ([]DeadLetter, error) {
	if delay < 0 || delay > MaxSQSReplayDelay {
		return nil, fmt.Errorf("%w: replay delay %s is not 0 to %s", transport.ErrInvalidConfig, delay, MaxSQSReplayDelay)
	}
	return s.replay(ctx, f, false, delay)
}

// DeadLetterPage returns the first limit dead letters f selects. SQS has
// no order and no cursor: Next is always "", and a cursor other than "" is
// ErrBadCursor.
func (s *SQS) DeadLetterPage(ctx context.Context, f Filter, cursor string, limit int) (Page, error) {
	if cursor != "" || limit < 1 || limit > 1000 {
		return Page{}, fmt.Errorf("%w: SQS dead letters have no pages", ErrBadCursor)
	}
	ds, err := s.DeadLetters(ctx, f, limit)
	return Page{DeadLetters: ds}, err
}

func (s *SQS) replay(ctx context.Context, f Filter, dryRun bool, delay time.Duration) ([]DeadLetter, error) {
	urls := map[string]string{}
	return s.settle(ctx, f, dryRun, func(qurl string, r received) error {
		if r.Queue == "" {
			return fmt.Errorf("sqs: dead letter %s names no source queue (no %s attribute)", r.ID, sqs.AttributeDeadLetter)
		}
		target, ok := urls[r.Queue]
		if !ok {
			u, err := s.dlqURL(ctx, r.Queue)
			if err != nil {
				return err
			}
			target, urls[r.Queue] = u, u
		}
		attrs := make(map[string]types.MessageAttributeValue, len(r.attrs))
		for k, v := range r.attrs {
			if k != sqs.AttributeDeadLetter {
				attrs[k] = v
			}
		}
		in := &awssqs.SendMessageInput{QueueUrl: aws.String(target), MessageBody: aws.String(r.body), MessageAttributes: attrs, DelaySeconds: int32(delay / time.Second)}
		if strings.HasSuffix(r.Queue, ".fifo") {
			if delay > 0 {
				return fmt.Errorf("sqs: %s is a FIFO queue: no per-message delay", r.Queue)
			}
			g := r.Metadata[sqs.MetadataGroupID]
			if g == "" {
				g = "berth-replay"
			}
			in.MessageGroupId = aws.String(g)
			in.MessageDeduplicationId = aws.String("replay-" + r.ID)
		}
		if _, err := s.Client.SendMessage(ctx, in); err != nil {
			return fmt.Errorf("sqs: replay %s to %s: %w", r.ID, r.Queue, err)
		}
		if _, err := s.Client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(qurl), ReceiptHandle: aws.String(r.receipt)}); err != nil {
			return fmt.Errorf("sqs: delete %s after replay: %w", r.ID, err)
		}
		return nil
	})
}

// Open opens the Inspector of a SQL or SQS URL. It creates nothing: a
// SQLite file or a schema (URL parameter schema) that does not exist is
// ErrNoDatabase.
func Open(ctx context.Context, rawURL string) (Inspector, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: bad URL: %w", transport.ErrInvalidConfig, err)
	}
	if u.Scheme == "sqs" {
		return OpenSQS(ctx, rawURL)
	}
	s, err := openSQL(ctx, rawURL, true)
	if errors.Is(err, ErrNotSQL) {
		return nil, fmt.Errorf("%w: %q has no queues to inspect (want postgres://, sqlite://, sqlserver:// or sqs://)", transport.ErrUnknownScheme, u.Scheme)
	}
	return s, err
}
