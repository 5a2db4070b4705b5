package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/transport"
)

// API is the subset of the SQS API the transport calls. *awssqs.Client
// implements it; tests substitute fakes at this seam.
type API interface {
	ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, opts ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *awssqs.DeleteMessageBatchInput, opts ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, opts ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error)
	SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, opts ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error)
	SendMessage(ctx context.Context, in *awssqs.SendMessageInput, opts ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error)
	GetQueueUrl(ctx context.Context, in *awssqs.GetQueueUrlInput, opts ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error)
	GetQueueAttributes(ctx context.Context, in *awssqs.GetQueueAttributesInput, opts ...func(*awssqs.Options)) (*awssqs.GetQueueAttributesOutput, error)
	CreateQueue(ctx context.Context, in *awssqs.CreateQueueInput, opts ...func(*awssqs.Options)) (*awssqs.CreateQueueOutput, error)
	SetQueueAttributes(ctx context.Context, in *awssqs.SetQueueAttributesInput, opts ...func(*awssqs.Options)) (*awssqs.SetQueueAttributesOutput, error)
}

// SNSAPI is the subset of the SNS API the transport calls. *awssns.Client
// implements it.
type SNSAPI interface {
	CreateTopic(ctx context.Context, in *awssns.CreateTopicInput, opts ...func(*awssns.Options)) (*awssns.CreateTopicOutput, error)
	ListTopics(ctx context.Context, in *awssns.ListTopicsInput, opts ...func(*awssns.Options)) (*awssns.ListTopicsOutput, error)
	Subscribe(ctx context.Context, in *awssns.SubscribeInput, opts ...func(*awssns.Options)) (*awssns.SubscribeOutput, error)
	PublishBatch(ctx context.Context, in *awssns.PublishBatchInput, opts ...func(*awssns.Options)) (*awssns.PublishBatchOutput, error)
	ListSubscriptionsByTopic(ctx context.Context, in *awssns.ListSubscriptionsByTopicInput, opts ...func(*awssns.Options)) (*awssns.ListSubscriptionsByTopicOutput, error)
}

var (
	_ API    = (*awssqs.Client)(nil)
	_ SNSAPI = (*awssns.Client)(nil)
)

// Name limits of SQS queues (80 characters, including ".fifo").
const maxQueueName = 80

// SanitizeName maps a Watermill topic to a valid SQS queue (and SNS topic)
// name: characters other than A-Z a-z 0-9 _ - become '_', and FIFO names get
// the ".fifo" suffix. When the topic had to change, or the name would exceed
// SQS's 80 characters, the name is cut to fit and ends with '-' and eight hex
// digits of the topic's SHA-256, so distinct topics never share a queue:
//
//	orders          → orders
//	orders.created  → orders_created-18d455b7
func SanitizeName(topic string, fifo bool) string {
	base := strings.TrimSuffix(topic, ".fifo")
	suffix := ""
	if fifo {
		suffix = ".fifo"
	}
	var b strings.Builder
	changed := base == ""
	for i := 0; i < len(base); i++ {
		c := base[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
			changed = true
		}
	}
	name := b.String()
	limit := maxQueueName - len(suffix)
	if !changed && len(name) <= limit {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(topic))
	h := "-" + hex.EncodeToString(sum[:4])
	if len(name) > limit-len(h) {
		name = name[:limit-len(h)]
	}
	return name + h + suffix
}

// queue is a resolved queue.
type queue struct {
	name    string
	url     string
	arn     string
	maxSize int // MaximumMessageSize
	fifo    bool
}

// resolver resolves queue names to URLs once and caches them, creating
// queues when configured to.
type resolver struct {
	api        API
	cfg        QueueConfig
	visibility int32 // VisibilityTimeout for created queues, 0 = SQS default

	mu     sync.Mutex
	queues map[string]*queue
}

func newResolver(api API, cfg QueueConfig, visibility int32) *resolver {
	return &resolver{api: api, cfg: cfg, visibility: visibility, queues: map[string]*queue{}}
}

// resolve returns the queue named name. withDLQ adds the redrive policy to
// a created queue.
func (r *resolver) resolve(ctx context.Context, name string, withDLQ bool) (*queue, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resolveLocked(ctx, name, withDLQ)
}

func (r *resolver) resolveLocked(ctx context.Context, name string, withDLQ bool) (*queue, error) {
	if q, ok := r.queues[name]; ok {
		return q, nil
	}
	var url string
	out, err := r.api.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	switch {
	case err == nil:
		url = aws.ToString(out.QueueUrl)
	case isQueueMissing(err) && r.cfg.Create:
		attrs := map[string]string{}
		for k, v := range r.cfg.Attributes {
			attrs[k] = v
		}
		if r.cfg.FIFO {
			attrs[string(types.QueueAttributeNameFifoQueue)] = "true"
			if r.cfg.ContentBasedDeduplication {
				attrs[string(types.QueueAttributeNameContentBasedDeduplication)] = "true"
			}
		}
		if r.cfg.MaximumMessageSize > 0 {
			attrs[string(types.QueueAttributeNameMaximumMessageSize)] = strconv.Itoa(r.cfg.MaximumMessageSize)
		}
		if r.visibility > 0 {
			attrs[string(types.QueueAttributeNameVisibilityTimeout)] = strconv.Itoa(int(r.visibility))
		}
		if withDLQ && r.cfg.DeadLetterQueue != "" && r.cfg.MaxReceiveCount > 0 {
			dlq, err := r.resolveLocked(ctx, r.dlqName(), false)
			if err != nil {
				return nil, err
			}
			policy, _ := json.Marshal(map[string]string{
				"deadLetterTargetArn": dlq.arn,
				"maxReceiveCount":     strconv.Itoa(r.cfg.MaxReceiveCount),
			})
			attrs[string(types.QueueAttributeNameRedrivePolicy)] = string(policy)
		}
		cout, err := r.api.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			return nil, fmt.Errorf("sqs: create queue %s: %w", name, err)
		}
		url = aws.ToString(cout.QueueUrl)
	case isQueueMissing(err):
		return nil, fmt.Errorf("sqs: queue %s: %w (set QueueConfig.Create, or create=true in the URL, to create it)", name, transport.ErrQueueNotFound)
	default:
		return nil, fmt.Errorf("sqs: get queue url %s: %w", name, err)
	}
	aout, err := r.api.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameQueueArn,
			types.QueueAttributeNameMaximumMessageSize,
			types.QueueAttributeNameFifoQueue,
		},
	})
	if err != nil {
		if isQueueMissing(err) {
			return nil, fmt.Errorf("sqs: queue %s: %w", name, transport.ErrQueueNotFound)
		}
		return nil, fmt.Errorf("sqs: get queue attributes %s: %w", name, err)
	}
	q := &queue{name: name, url: url, maxSize: 1 << 20}
	q.arn = aout.Attributes[string(types.QueueAttributeNameQueueArn)]
	if n, err := strconv.Atoi(aout.Attributes[string(types.QueueAttributeNameMaximumMessageSize)]); err == nil && n > 0 {
		q.maxSize = n
	}
	q.fifo = aout.Attributes[string(types.QueueAttributeNameFifoQueue)] == "true" || strings.HasSuffix(name, ".fifo")
	r.queues[name] = q
	return q, nil
}

// dlqName is the configured dead-letter queue's name, with ".fifo" added for
// FIFO queues (whose dead-letter queue must be FIFO too).
func (r *resolver) dlqName() string {
	n := r.cfg.DeadLetterQueue
	if r.cfg.FIFO && !strings.HasSuffix(n, ".fifo") {
		n += ".fifo"
	}
	return n
}

// forget drops a cached queue, so the next resolve asks again (after the
// queue was deleted).
func (r *resolver) forget(name string) {
	r.mu.Lock()
	delete(r.queues, name)
	r.mu.Unlock()
}

func isQueueMissing(err error) bool {
	var qne *types.QueueDoesNotExist
	if errors.As(err, &qne) {
		return true
	}
	var ae interface{ ErrorCode() string }
	if errors.As(err, &ae) {
		c := ae.ErrorCode()
		return c == "AWS.SimpleQueueService.NonExistentQueue" || c == "QueueDoesNotExist"
	}
	return false
}
