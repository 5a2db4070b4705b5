package sqsbench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/transport/sqs"
)

// Sizes of the publish scenarios at Scale 1.
const (
	// SequentialMessages is how many messages "sqs/publish-sequential"
	// publishes, one Publish call after the other.
	SequentialMessages = 3_000
	// ConcurrentRate is the arrival rate of "sqs/publish-concurrent", in
	// messages per second, each published by its own Publish call.
	ConcurrentRate = 1_000
	// ConcurrentProducers publish the arrivals of "sqs/publish-concurrent".
	ConcurrentProducers = 8
	// ConcurrentDuration is how long "sqs/publish-concurrent" publishes.
	ConcurrentDuration = 30 * time.Second
	// BenchLinger is the PublishLinger of the "berth-linger" strategy.
	BenchLinger = 8 * time.Millisecond
)

// Scenario names of the publish scenarios.
const (
	ScenarioPublishSequential = "sqs/publish-sequential"
	ScenarioPublishConcurrent = "sqs/publish-concurrent"
)

// BerthLinger is Berth with PublishLinger set to BenchLinger: concurrent
// single-message Publish calls share batch requests. It only publishes.
var BerthLinger = Strategy{
	Name: "berth-linger",
	NewPublisher: func(c Client) (message.Publisher, error) {
		return sqs.NewPublisher(sqs.PublisherConfig{
			Client:        sqs.ClientConfig{AWS: &c.AWS, Endpoint: c.Endpoint},
			Queue:         sqs.QueueConfig{Create: true},
			PublishLinger: BenchLinger,
		}, nil)
	},
}

// PublishStrategies are compared in the publish scenarios.
var PublishStrategies = []Strategy{Berth, BerthLinger, WatermillAWS}

func init() {
	bench.Register(bench.Scenario{
		Name: ScenarioPublishSequential,
		Description: "3,000 messages published one Publish call after the other by one goroutine: " +
			"publish throughput, latency and API requests per message.",
		Needs: []string{"sqs"},
		Run: func(ctx context.Context, env bench.Env) ([]bench.Result, error) {
			return runPublish(ctx, env, publishSequential)
		},
	})
	bench.Register(bench.Scenario{
		Name: ScenarioPublishConcurrent,
		Description: "1,000 messages/s arriving for 30 s, each published by its own Publish call from a pool of 8 producers: " +
			"API requests per message and Publish latency.",
		Needs: []string{"sqs"},
		Run: func(ctx context.Context, env bench.Env) ([]bench.Result, error) {
			return runPublish(ctx, env, publishConcurrent)
		},
	})
}

// runPublish runs scenario for each of PublishStrategies in turn.
func runPublish(ctx context.Context, env bench.Env, scenario func(context.Context, *runEnv, Strategy) (bench.Result, error)) ([]bench.Result, error) {
	e, err := newRunEnv(env)
	if err != nil {
		return nil, err
	}
	defer e.close()
	var out []bench.Result
	for i, st := range PublishStrategies {
		e.progress(float64(i)/float64(len(PublishStrategies)), st.Name)
		r, err := scenario(ctx, e, st)
		if err != nil {
			return out, fmt.Errorf("%s: %w", st.Name, err)
		}
		out = append(out, r)
	}
	e.progress(1, "done")
	return out, nil
}

// publishTo prepares a publisher and its queue (resolved by a first
// message, not counted) and returns them with the counter.
func (e *runEnv) publishTo(ctx context.Context, scenario string, st Strategy) (message.Publisher, string, *Counter, *roundTrips, error) {
	name := topic(scenario, st)
	if _, err := e.admin.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
		return nil, "", nil, nil, err
	}
	c := &Counter{}
	client := e.client(st, c)
	rt := &roundTrips{}
	client.AWS.APIOptions = append(client.AWS.APIOptions[:len(client.AWS.APIOptions):len(client.AWS.APIOptions)], rt.apiOption)
	pub, err := st.NewPublisher(client)
	if err != nil {
		return nil, "", nil, nil, err
	}
	if err := pub.Publish(name, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
		_ = pub.Close()
		return nil, "", nil, nil, fmt.Errorf("first publish: %w", err)
	}
	c.Reset()
	rt.reset()
	return pub, name, c, rt, nil
}

// roundTrips records the duration of every API call as the SDK's caller
// sees it (serialising, signing, the HTTP round trip, checking the
// response's MD5 digests, retries): the round trips a Publish call's
// latency is compared with.
type roundTrips struct {
	mu sync.Mutex
	ds []time.Duration
}

// apiOption adds the timing middleware to an SDK client's stack.
func (r *roundTrips) apiOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("berthBenchRoundTrip",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			start := time.Now()
			out, md, err := next.HandleInitialize(ctx, in)
			d := time.Since(start)
			r.mu.Lock()
			r.ds = append(r.ds, d)
			r.mu.Unlock()
			return out, md, err
		}), middleware.Before)
}

func (r *roundTrips) reset() {
	r.mu.Lock()
	r.ds = nil
	r.mu.Unlock()
}

// addTo sets rtt_p50_ms and rtt_p99_ms in m.
func (r *roundTrips) addTo(m map[string]float64) {
	r.mu.Lock()
	ds := slices.Clone(r.ds)
	r.mu.Unlock()
	slices.Sort(ds)
	m["rtt_p50_ms"] = ms(quantile(ds, 0.50))
	m["rtt_p99_ms"] = ms(quantile(ds, 0.99))
}

// publishSequential publishes SequentialMessages × Scale messages (at least
// 200), one Publish call after the other.
func publishSequential(ctx context.Context, e *runEnv, st Strategy) (bench.Result, error) {
	n := max(200, int(math.Round(SequentialMessages*e.env.Scale)))
	pub, name, c, rt, err := e.publishTo(ctx, "pubseq", st)
	if err != nil {
		return bench.Result{}, err
	}
	defer e.deleteQueue(name)
	defer pub.Close()
	msgs := newMessages(n)
	lat := make([]time.Duration, 0, n)
	start := time.Now()
	for _, m := range msgs {
		if err := ctx.Err(); err != nil {
			return bench.Result{}, err
		}
		t := time.Now()
		if err := pub.Publish(name, m); err != nil {
			return bench.Result{}, fmt.Errorf("publish: %w", err)
		}
		lat = append(lat, time.Since(t))
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	m := map[string]float64{
		"publish_msg_per_s":          float64(n) / elapsed.Seconds(),
		"requests_per_published_msg": float64(c.Total()) / float64(n),
		"p50_ms":                     ms(quantile(lat, 0.50)),
		"p99_ms":                     ms(quantile(lat, 0.99)),
	}
	addCounts(m, "requests.", c.Counts())
	rt.addTo(m)
	return bench.Result{
		Scenario: ScenarioPublishSequential, Strategy: st.Name, Instances: 1, Messages: n, Duration: elapsed, Metrics: m,
		Notes: "one goroutine, one message per Publish call; latency of each call",
	}, nil
}

// publishConcurrent publishes ConcurrentRate messages a second for
// ConcurrentDuration × Scale (at least 5 s), each by its own Publish call
// from a pool of ConcurrentProducers. Arrivals keep their schedule (a late
// tick makes up the arrivals due); an arrival waits for a free producer.
// p50_ms/p99_ms are the Publish calls' latency; arrival_p99_ms adds the
// wait for a producer; rtt_p50_ms/rtt_p99_ms are the API calls'.
func publishConcurrent(ctx context.Context, e *runEnv, st Strategy) (bench.Result, error) {
	dur := max(5*time.Second, time.Duration(float64(ConcurrentDuration)*e.env.Scale))
	pub, name, c, rt, err := e.publishTo(ctx, "pubconc", st)
	if err != nil {
		return bench.Result{}, err
	}
	defer e.deleteQueue(name)
	defer pub.Close()

	type arrival struct {
		msg *message.Message
		at  time.Time
	}
	arrivals := make(chan arrival, ConcurrentRate*10)
	var (
		producers sync.WaitGroup
		mu        sync.Mutex
		calls     []time.Duration
		waits     []time.Duration
		sent      atomic.Int64
		pubErr    atomic.Pointer[error]
	)
	for range ConcurrentProducers {
		producers.Go(func() {
			var myCalls, myWaits []time.Duration
			for a := range arrivals {
				t := time.Now()
				if err := pub.Publish(name, a.msg); err != nil {
					pubErr.CompareAndSwap(nil, &err)
					continue
				}
				done := time.Now()
				myCalls = append(myCalls, done.Sub(t))
				myWaits = append(myWaits, done.Sub(a.at))
				sent.Add(1)
			}
			mu.Lock()
			calls = append(calls, myCalls...)
			waits = append(waits, myWaits...)
			mu.Unlock()
		})
	}
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	due, issued, dropped := 0, 0, 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-tick.C:
			el := now.Sub(start)
			if el >= dur {
				break loop
			}
			due = int(el.Seconds() * ConcurrentRate)
			for ; issued < due; issued++ {
				select {
				case arrivals <- arrival{msg: message.NewMessage(watermill.NewUUID(), payload), at: now}:
				default:
					dropped++ // ten seconds of arrivals waiting: far behind
				}
			}
		}
	}
	tick.Stop()
	close(arrivals)
	producers.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return bench.Result{}, err
	}
	if p := pubErr.Load(); p != nil {
		return bench.Result{}, fmt.Errorf("publish: %w", *p)
	}
	published := sent.Load()
	slices.Sort(calls)
	slices.Sort(waits)
	m := map[string]float64{
		"msg_per_s":                  float64(published) / elapsed.Seconds(),
		"requests_per_published_msg": float64(c.Total()) / float64(published),
		"p50_ms":                     ms(quantile(calls, 0.50)),
		"p99_ms":                     ms(quantile(calls, 0.99)),
		"max_ms":                     ms(quantile(calls, 1)),
		"arrival_p99_ms":             ms(quantile(waits, 0.99)),
		"dropped_arrivals":           float64(dropped),
	}
	addCounts(m, "requests.", c.Counts())
	rt.addTo(m)
	return bench.Result{
		Scenario: ScenarioPublishConcurrent, Strategy: st.Name, Instances: 1, Messages: int(published), Duration: elapsed, Metrics: m,
		Notes: fmt.Sprintf("%d msg/s for %s, one message per Publish call, %d producers", ConcurrentRate, dur, ConcurrentProducers),
	}, nil
}
