package sqsbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/bench"
)

// Sizes of the scenarios at Scale 1; Env.Scale multiplies them.
const (
	// Concurrency is the handler concurrency of every strategy.
	Concurrency = 16
	// BacklogSize is the backlog consumed by "sqs/backlog".
	BacklogSize = 10_000
	// SteadyRate is the arrival rate of "sqs/steady", in messages per
	// second, each published by its own Publish call.
	SteadyRate = 100
	// SteadyDuration is how long "sqs/steady" publishes.
	SteadyDuration = time.Minute
	// IdleDuration is how long "sqs/idle" watches an empty queue; at
	// reduced scale it is rounded up to whole IdleStep.
	IdleDuration = time.Minute
	// IdleStep is a whole number of both libraries' default long-poll
	// waits (watermill-aws 20 s, Berth 5 s).
	IdleStep = 20 * time.Second

	// steadyProducers publish the steady arrivals.
	steadyProducers = 8
)

// Scenario names.
const (
	ScenarioBacklog = "sqs/backlog"
	ScenarioSteady  = "sqs/steady"
	ScenarioIdle    = "sqs/idle"
)

func init() {
	bench.Register(bench.Scenario{
		Name: ScenarioBacklog,
		Description: "Publish a 10,000-message backlog, then consume it with 16 handlers " +
			"(acking at once): throughput and API requests per published and consumed message.",
		Needs: []string{"sqs"},
		Run:   func(ctx context.Context, env bench.Env) ([]bench.Result, error) { return run(ctx, env, backlog) },
	})
	bench.Register(bench.Scenario{
		Name: ScenarioSteady,
		Description: "100 messages/s arriving one Publish call each for a minute, consumed by 16 handlers: " +
			"API requests per message and publish-to-handler latency.",
		Needs: []string{"sqs"},
		Run:   func(ctx context.Context, env bench.Env) ([]bench.Result, error) { return run(ctx, env, steady) },
	})
	bench.Register(bench.Scenario{
		Name: ScenarioIdle,
		Description: "An idle minute on an empty queue with 16 handlers: " +
			"API requests per minute and outstanding long polls.",
		Needs: []string{"sqs"},
		Run: func(ctx context.Context, env bench.Env) ([]bench.Result, error) {
			e, err := newRunEnv(env)
			if err != nil {
				return nil, err
			}
			defer e.close()
			return idleAll(ctx, e, Strategies...)
		},
	})
}

// run runs scenario for each strategy in turn.
func run(ctx context.Context, env bench.Env, scenario func(context.Context, *runEnv, Strategy) (bench.Result, error)) ([]bench.Result, error) {
	e, err := newRunEnv(env)
	if err != nil {
		return nil, err
	}
	defer e.close()
	var out []bench.Result
	for i, st := range Strategies {
		e.progress(float64(i)/float64(len(Strategies)), st.Name)
		r, err := scenario(ctx, e, st)
		if err != nil {
			return out, fmt.Errorf("%s: %w", st.Name, err)
		}
		out = append(out, r)
	}
	e.progress(1, "done")
	return out, nil
}

// runEnv is what the scenarios share in one run.
type runEnv struct {
	env       bench.Env
	endpoint  string
	aws       aws.Config
	transport *http.Transport // shared connection pool, under each Counter
	admin     *awssqs.Client  // uncounted: queue attributes, clean-up
}

// newRunEnv prepares a run against env.SQSEndpoint.
func newRunEnv(env bench.Env) (*runEnv, error) {
	if env.SQSEndpoint == "" {
		return nil, errors.New("sqsbench: no SQS endpoint (set BERTH_TEST_SQS_ENDPOINT, or run make services-up)")
	}
	if env.Scale <= 0 {
		env.Scale = 1
	}
	cfg := aws.Config{
		Region: getenv("AWS_REGION", "us-east-1"),
		Credentials: credentials.NewStaticCredentialsProvider(
			getenv("AWS_ACCESS_KEY_ID", "test"), getenv("AWS_SECRET_ACCESS_KEY", "test"), ""),
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	e := &runEnv{env: env, endpoint: env.SQSEndpoint, aws: cfg, transport: tr}
	admin := cfg.Copy()
	admin.HTTPClient = &http.Client{Transport: tr}
	e.admin = awssqs.NewFromConfig(admin, endpointOption(env.SQSEndpoint)...)
	return e, nil
}

// close drops the idle connections of the run.
func (e *runEnv) close() { e.transport.CloseIdleConnections() }

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (e *runEnv) progress(f float64, status string) {
	if e.env.Progress != nil {
		e.env.Progress(f, status)
	}
}

// topic returns a fresh queue name for one scenario and strategy.
func topic(scenario string, st Strategy) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "bench-" + scenario + "-" + st.Name + "-" + hex.EncodeToString(b)
}

// queueURL resolves a queue without counting.
func (e *runEnv) queueURL(ctx context.Context, name string) (string, error) {
	out, err := e.admin.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueUrl), nil
}

// deleteQueue removes a queue after a run (best effort).
func (e *runEnv) deleteQueue(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if url, err := e.queueURL(ctx, name); err == nil {
		_, _ = e.admin.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	}
}

// waitEmpty waits until the queue has no visible and no in-flight message:
// every ack has reached SQS.
func (e *runEnv) waitEmpty(ctx context.Context, name string, timeout time.Duration) error {
	url, err := e.queueURL(ctx, name)
	if err != nil {
		return err
	}
	return waitFor(ctx, timeout, "queue "+name+" empty", func() (bool, error) {
		out, err := e.admin.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url),
			AttributeNames: []types.QueueAttributeName{
				types.QueueAttributeNameApproximateNumberOfMessages,
				types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			},
		})
		if err != nil {
			return false, err
		}
		return out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)] == "0" &&
			out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)] == "0", nil
	})
}

// waitFor polls cond every 5 ms (the services are external: there is no
// signal to wait on) until it holds, it fails, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// payload is the body of every benchmark message (a small JSON event).
var payload = []byte(`{"event":"order_placed","order_id":"0000000000","customer":"c-000000","amount_cents":12345,"currency":"EUR","items":3}`)

func newMessages(n int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), payload)
	}
	return msgs
}

// addCounts puts the request counts by operation into metrics as
// "requests.<Operation>".
func addCounts(metrics map[string]float64, prefix string, counts map[string]int64) {
	for op, n := range counts {
		metrics[prefix+op] = float64(n)
	}
}

// backlog publishes BacklogSize × Scale messages, then consumes them with
// Concurrency handlers that ack at once, until the queue is empty (every
// delete has reached SQS).
func backlog(ctx context.Context, e *runEnv, st Strategy) (bench.Result, error) {
	n := max(100, int(math.Round(BacklogSize*e.env.Scale)))
	name := topic("backlog", st)
	defer e.deleteQueue(name)
	var pubC, subC Counter

	pub, err := st.NewPublisher(e.client(st, &pubC))
	if err != nil {
		return bench.Result{}, err
	}
	defer pub.Close()
	msgs := newMessages(n)
	start := time.Now()
	if err := st.PublishAll(pub, name, msgs); err != nil {
		return bench.Result{}, fmt.Errorf("publish: %w", err)
	}
	pubElapsed := time.Since(start)
	e.progress(0, st.Name+": published")

	sub, err := st.NewSubscriber(e.client(st, &subC), Concurrency)
	if err != nil {
		return bench.Result{}, err
	}
	var acked atomic.Int64
	start = time.Now()
	c, err := consume(sub, st, name, Concurrency, func(*message.Message) { acked.Add(1) })
	if err != nil {
		_ = sub.Close()
		return bench.Result{}, err
	}
	stop := func() {
		c.stop()
		_ = sub.Close()
		c.wait()
	}
	timeout := 5*time.Minute + time.Duration(n)*10*time.Millisecond
	if err := waitFor(ctx, timeout, "all messages acked", func() (bool, error) { return acked.Load() >= int64(n), nil }); err != nil {
		stop()
		return bench.Result{}, err
	}
	if err := e.waitEmpty(ctx, name, time.Minute); err != nil {
		stop()
		return bench.Result{}, err
	}
	elapsed := time.Since(start)
	counts := subC.Counts()
	consumeReq := subC.Total()
	stop()

	m := map[string]float64{
		"msg_per_s":                  float64(n) / elapsed.Seconds(),
		"requests_per_consumed_msg":  float64(consumeReq) / float64(n),
		"requests_per_published_msg": float64(pubC.Total()) / float64(n),
		"publish_msg_per_s":          float64(n) / pubElapsed.Seconds(),
		"consumed":                   float64(acked.Load()),
	}
	addCounts(m, "requests.", counts)
	return bench.Result{
		Scenario: ScenarioBacklog, Strategy: st.Name, Instances: 1, Messages: n, Duration: elapsed, Metrics: m,
		Notes: fmt.Sprintf("concurrency %d; consume time until the queue is empty; publish took %s", Concurrency, pubElapsed.Round(time.Millisecond)),
	}, nil
}

// MetadataSentAt carries the publish time (Unix ns) for latency.
const MetadataSentAt = "bench_sent_at"

// steady publishes SteadyRate messages per second, each with its own
// Publish call, for SteadyDuration × Scale (at least 5 s), while
// Concurrency handlers consume them; it then waits until all are consumed
// and deleted.
func steady(ctx context.Context, e *runEnv, st Strategy) (bench.Result, error) {
	dur := max(5*time.Second, time.Duration(float64(SteadyDuration)*e.env.Scale))
	name := topic("steady", st)
	defer e.deleteQueue(name)
	var pubC, subC Counter
	pub, err := st.NewPublisher(e.client(st, &pubC))
	if err != nil {
		return bench.Result{}, err
	}
	defer pub.Close()
	// The queue exists before the subscriber starts.
	if _, err := e.admin.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
		return bench.Result{}, err
	}
	sub, err := st.NewSubscriber(e.client(st, &subC), Concurrency)
	if err != nil {
		return bench.Result{}, err
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		received  atomic.Int64
	)
	c, err := consume(sub, st, name, Concurrency, func(msg *message.Message) {
		sent, err := strconv.ParseInt(msg.Metadata.Get(MetadataSentAt), 10, 64)
		if err != nil {
			return
		}
		lat := time.Since(time.Unix(0, sent))
		mu.Lock()
		latencies = append(latencies, lat)
		mu.Unlock()
		received.Add(1)
	})
	if err != nil {
		_ = sub.Close()
		return bench.Result{}, err
	}
	stop := func() {
		c.stop()
		_ = sub.Close()
		c.wait()
	}
	// Count from the first arrival: queue resolution is not per message.
	pubC.Reset()
	subC.Reset()

	// Arrivals keep their schedule whatever a Publish call costs: each
	// tick hands one message to a pool of producers.
	start := time.Now()
	arrivals := make(chan *message.Message, SteadyRate)
	var (
		producers sync.WaitGroup
		sent      atomic.Int64
		pubErr    atomic.Pointer[error]
	)
	for range steadyProducers {
		producers.Go(func() {
			for msg := range arrivals {
				msg.Metadata.Set(MetadataSentAt, strconv.FormatInt(time.Now().UnixNano(), 10))
				if err := pub.Publish(name, msg); err != nil {
					pubErr.CompareAndSwap(nil, &err)
					continue
				}
				sent.Add(1)
			}
		})
	}
	tick := time.NewTicker(time.Second / SteadyRate)
	end := time.After(dur)
	var late int
publish:
	for {
		select {
		case <-ctx.Done():
			break publish
		case <-end:
			break publish
		case <-tick.C:
			select {
			case arrivals <- message.NewMessage(watermill.NewUUID(), payload):
			default:
				late++ // every producer busy, a second's arrivals queued
			}
		}
	}
	tick.Stop()
	close(arrivals)
	producers.Wait()
	pubElapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		stop()
		return bench.Result{}, err
	}
	if p := pubErr.Load(); p != nil {
		stop()
		return bench.Result{}, fmt.Errorf("publish: %w", *p)
	}
	published := sent.Load()
	if err := waitFor(ctx, time.Minute, "all messages consumed", func() (bool, error) { return received.Load() >= published, nil }); err != nil {
		stop()
		return bench.Result{}, err
	}
	if err := e.waitEmpty(ctx, name, time.Minute); err != nil {
		stop()
		return bench.Result{}, err
	}
	elapsed := time.Since(start)
	counts := subC.Counts()
	consumeReq := subC.Total()
	early := subC.EarlyEmpty()
	stop()

	mu.Lock()
	slices.Sort(latencies)
	mu.Unlock()
	consumed := float64(received.Load())
	m := map[string]float64{
		"msg_per_s":                 float64(published) / pubElapsed.Seconds(),
		"requests_per_consumed_msg": float64(consumeReq) / consumed,
		"early_empty_receives":      float64(early),
		"requests_per_consumed_msg_without_early_empty": float64(consumeReq-early) / consumed,
		"dropped_arrivals":           float64(late),
		"requests_per_published_msg": float64(pubC.Total()) / float64(published),
		"p50_ms":                     ms(quantile(latencies, 0.50)),
		"p99_ms":                     ms(quantile(latencies, 0.99)),
		"max_ms":                     ms(quantile(latencies, 1)),
	}
	addCounts(m, "requests.", counts)
	return bench.Result{
		Scenario: ScenarioSteady, Strategy: st.Name, Instances: 1, Messages: int(published), Duration: elapsed, Metrics: m,
		Notes: fmt.Sprintf("concurrency %d; %d msg/s for %s, one message per Publish call", Concurrency, SteadyRate, dur),
	}, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile returns the q-quantile of sorted durations (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// idleAll subscribes each strategy, at the same time, to its own empty queue
// with Concurrency handlers and counts the requests sent during
// IdleDuration × Scale (rounded up to whole IdleStep), starting once the
// first long poll is out, and the most ReceiveMessage calls outstanding at
// once.
func idleAll(ctx context.Context, e *runEnv, sts ...Strategy) ([]bench.Result, error) {
	steps := max(1, int(math.Ceil(float64(IdleDuration)*e.env.Scale/float64(IdleStep)-1e-9)))
	window := time.Duration(steps) * IdleStep
	type run struct {
		res bench.Result
		err error
	}
	runs := make([]run, len(sts))
	var wg sync.WaitGroup
	for i, st := range sts {
		wg.Go(func() {
			runs[i].res, runs[i].err = idle(ctx, e, st, window)
		})
	}
	e.progress(0, fmt.Sprintf("idle for %s", window))
	wg.Wait()
	var (
		out  []bench.Result
		errs []error
	)
	for i, r := range runs {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sts[i].Name, r.err))
			continue
		}
		out = append(out, r.res)
	}
	e.progress(1, "done")
	return out, errors.Join(errs...)
}

func idle(ctx context.Context, e *runEnv, st Strategy, window time.Duration) (bench.Result, error) {
	name := topic("idle", st)
	defer e.deleteQueue(name)
	if _, err := e.admin.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
		return bench.Result{}, err
	}
	var subC Counter
	sub, err := st.NewSubscriber(e.client(st, &subC), Concurrency)
	if err != nil {
		return bench.Result{}, err
	}
	var got atomic.Int64
	c, err := consume(sub, st, name, Concurrency, func(*message.Message) { got.Add(1) })
	if err != nil {
		_ = sub.Close()
		return bench.Result{}, err
	}
	defer func() {
		c.stop()
		_ = sub.Close()
		c.wait()
	}()
	// Start counting a second after the first long poll went out, clear of
	// start-up requests and of the boundaries of the long polls.
	if err := waitFor(ctx, 10*time.Second, "first long poll", func() (bool, error) { return subC.Peak("ReceiveMessage") > 0, nil }); err != nil {
		return bench.Result{}, err
	}
	select {
	case <-ctx.Done():
		return bench.Result{}, ctx.Err()
	case <-time.After(time.Second):
	}
	subC.Reset()
	select {
	case <-ctx.Done():
		return bench.Result{}, ctx.Err()
	case <-time.After(window):
	}
	counts := subC.Counts()
	m := map[string]float64{
		"requests_per_minute_idle": float64(subC.Total()) / window.Minutes(),
		"early_empty_receives":     float64(subC.EarlyEmpty()),
		"outstanding_long_polls":   float64(subC.Peak("ReceiveMessage")),
		"received":                 float64(got.Load()),
	}
	addCounts(m, "requests.", counts)
	return bench.Result{
		Scenario: ScenarioIdle, Strategy: st.Name, Instances: 1, Duration: window, Metrics: m,
		Notes: fmt.Sprintf("concurrency %d; counted over %s", Concurrency, window),
	}, nil
}
