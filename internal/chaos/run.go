package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/batching"
	"github.com/berth-go/berth/health"
	"github.com/berth-go/berth/internal/subopt"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/transporttest"
)

// Metadata the harness sets on published messages.
const (
	metaPoison = "chaos_poison"
	metaSeq    = "chaos_seq"
)

// errHandler is the error an injected handler failure returns.
var errHandler = errors.New("chaos: injected handler error")

// instance is one subscriber "process".
type instance struct {
	id     string
	batch  bool
	sub    subscriber
	link   link
	health *health.Handler
	killed atomic.Bool
	dead   chan struct{} // closed at cleanup: blocked handlers of a killed instance return
	cancel context.CancelFunc
	done   sync.WaitGroup // consuming goroutines
}

type runner struct {
	cfg    *Config
	b      backend
	ledger *Ledger
	topic  string
	pcfg   receiver.Config
	// faults injects the berth: kinds into every instance's source and
	// logger (this run's own: nothing is process-wide).
	faults *transporttest.Faults
	// fx is the exactly-once ledger (Config.Effects), or nil.
	fx *effects

	rebuilds      atomic.Int64
	handlerErrs   atomic.Int64
	handlerPanics atomic.Int64

	mu       sync.Mutex
	live     []*instance // one per slot
	zombies  []*instance // killed, closed at the end
	restarts int
}

type observer struct {
	transport.NopObserver
	r *runner
}

func (o observer) Rebuilt(string) { o.r.rebuilds.Add(1) }

// Run runs the harness once and returns its report. The error is about the
// harness itself (a broker it cannot reach); the verdict on Berth is
// Report.OK and Report.Problems.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.withDefaults()
	run := strconv.FormatUint(rand.Uint64()%1e10, 36)
	var b backend
	var err error
	switch cfg.Transport {
	case "postgres":
		b, err = newPostgres(ctx, &cfg, run)
	case "sqlite":
		b, err = newSQLite(&cfg, run)
	case "sqs":
		b = newSQS(&cfg, run)
	}
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: &cfg, b: b, ledger: NewLedger(), faults: transporttest.NewFaults()}
	switch bb := b.(type) {
	case *sqlBackend:
		r.topic = bb.topic
	case *sqsBackend:
		r.topic = bb.topic
	}
	r.pcfg = receiver.Config{
		Concurrency:   8,
		MaxAttempts:   cfg.MaxAttempts,
		RetryDelay:    20 * time.Millisecond,
		MaxRetryDelay: 300 * time.Millisecond,
		DrainTimeout:  3 * time.Second,
		CheckInterval: 100 * time.Millisecond,
		ErrorBackoff:  50 * time.Millisecond,
		MaxErrorDelay: time.Second,
		Observer:      observer{r: r},
	}
	if cfg.Effects {
		if r.fx, err = r.openEffects(ctx); err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			return nil, errors.Join(err, b.close(cctx))
		}
	}
	rep, err := r.run(ctx)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if r.fx != nil {
		r.fx.release(cctx)
	}
	err = errors.Join(err, b.close(cctx))
	return rep, err
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "%s [%s] %s\n", time.Now().Format("15:04:05.000"), r.b.name(), fmt.Sprintf(format, args...))
	}
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	start := time.Now()
	cfg := r.cfg
	rep := &Report{Seed: cfg.Seed, Transport: r.b.name(), Messages: cfg.Messages, Instances: cfg.Instances, Duration: cfg.Duration}

	for i := range cfg.Instances {
		if err := r.startInstance(ctx, i); err != nil {
			r.shutdown()
			return nil, err
		}
	}
	defer r.shutdown()

	pub, err := r.b.publisher(ctx)
	if err != nil {
		return nil, err
	}
	defer pub.Close()

	// Publish over the first 80% of the fault phase.
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	pubDone := make(chan error, 1)
	go func() { pubDone <- r.publish(pubCtx, pub, cfg.Duration*8/10) }()

	// The fault phase.
	kinds := cfg.Kinds
	if len(kinds) == 0 {
		kinds = append(kinds, r.b.kinds()...)
		for _, p := range berthPoints {
			kinds = append(kinds, KindBerthPrefix+Kind(p))
		}
	}
	faultEnd := start.Add(cfg.Duration)
	for time.Now().Before(faultEnd) && ctx.Err() == nil {
		pause := time.Duration(float64(cfg.FaultInterval) * (0.5 + cfg.rnd()))
		if !sleepCtx(ctx, pause) {
			break
		}
		k := kinds[int(cfg.rnd()*float64(len(kinds)))]
		fr, err := r.inject(ctx, k)
		if err != nil {
			r.logf("fault %s failed to inject: %v", k, err)
			continue
		}
		rep.Faults = append(rep.Faults, fr)
		r.status()
	}

	if err := <-pubDone; err != nil {
		return nil, fmt.Errorf("chaos: publish: %w", err)
	}
	r.logf("fault phase over; draining")

	// Drain: wait until every message is handled and every poison message
	// dead-lettered.
	poison := r.poisonCount()
	drainEnd := time.Now().Add(cfg.DrainWait)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		if err := r.collectDead(ctx); err != nil {
			r.logf("reading dead letters: %v", err)
		}
		c := r.ledger.Counts()
		if r.ledger.Outstanding() == 0 && c.DeadPoison >= poison {
			// Every message was handled, but a row whose ack failed near
			// the end of the fault phase is still leased: it returns when
			// its lease runs out and is handled again (a duplicate). Wait
			// for the broker to be empty too, so that the leftover count
			// below sees what the subscribers left, not the race.
			if n, err := r.b.leftover(ctx); err == nil && n == 0 {
				break
			}
		}
		if time.Now().After(drainEnd) || ctx.Err() != nil {
			r.logf("drain timed out: %d outstanding, %d of %d poison dead-lettered", r.ledger.Outstanding(), c.DeadPoison, poison)
			break
		}
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			r.status()
		}
		<-tick.C
	}

	// Close every live instance gracefully, then count what is left.
	r.shutdown()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = r.collectDead(cctx)
	n, err := r.b.leftover(cctx)
	if err != nil {
		rep.Problems = append(rep.Problems, "cannot count leftover: "+err.Error())
	}
	rep.Leftover = n
	rep.Counts = r.ledger.Counts()
	rep.Rebuilds = r.rebuilds.Load()
	rep.Restarts = r.restarts
	rep.HandlerErrs = r.handlerErrs.Load()
	rep.HandlerPanics = r.handlerPanics.Load()
	if r.fx != nil {
		if got, err := r.fx.counts(cctx); err != nil {
			rep.Problems = append(rep.Problems, "cannot read the effects: "+err.Error())
		} else {
			rep.Effects = r.ledger.effectCounts(got)
		}
	}
	rep.Elapsed = time.Since(start)
	// Each fault can at most redeliver what every instance held: its
	// buffer, its in-flight messages and a settle batch of acks.
	perInstance := r.pcfg.Concurrency*3 + 256
	rep.DupBound = len(rep.Faults) * cfg.Instances * perInstance
	rep.check()
	return rep, nil
}

func (r *runner) poisonCount() int {
	if r.cfg.PoisonEvery < 0 {
		return 0
	}
	return r.cfg.Messages / r.cfg.PoisonEvery
}

func (r *runner) collectDead(ctx context.Context) error {
	ids, err := r.b.deadLetters(ctx)
	for _, id := range ids {
		r.ledger.DeadLettered(id)
	}
	return err
}

func (r *runner) status() {
	d, t := r.ledger.Progress()
	r.logf("handled %d distinct (%d handlings), %d outstanding, rebuilds %d", d, t, r.ledger.Outstanding(), r.rebuilds.Load())
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// publish sends cfg.Messages messages in batches spread over d, retrying a
// failed batch until it is accepted.
func (r *runner) publish(ctx context.Context, pub message.Publisher, d time.Duration) error {
	n := r.cfg.Messages
	const tickEvery = 50 * time.Millisecond
	ticks := max(int(d/tickEvery), 1)
	per := max((n+ticks-1)/ticks, 1)
	next := time.Now()
	for sent := 0; sent < n; {
		k := min(per, n-sent)
		msgs := make([]*message.Message, k)
		poison := make([]bool, k)
		for i := range k {
			seq := sent + i + 1
			id := fmt.Sprintf("%s-%07d", r.topic, seq)
			msgs[i] = message.NewMessage(id, []byte(`{"seq":`+strconv.Itoa(seq)+`}`))
			msgs[i].Metadata.Set(metaSeq, strconv.Itoa(seq))
			if r.cfg.PoisonEvery > 0 && seq%r.cfg.PoisonEvery == 0 {
				msgs[i].Metadata.Set(metaPoison, "1")
				poison[i] = true
			}
		}
		for attempt := 0; ; attempt++ {
			err := pub.Publish(r.topic, msgs...)
			if err == nil {
				break
			}
			if attempt%20 == 0 {
				r.logf("publish failed (retrying): %v", err)
			}
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
		}
		for i, m := range msgs {
			r.ledger.Published(m.UUID, poison[i])
		}
		sent += k
		next = next.Add(tickEvery)
		if w := time.Until(next); w > 0 && !sleepCtx(ctx, w) {
			return ctx.Err()
		}
	}
	return nil
}

// handle is the user code: poison is always rejected; otherwise attempts 1
// and 2 fail at the configured rates.
func (r *runner) handle(inst *instance, msg *message.Message) (err error) {
	if msg.Metadata.Get(metaPoison) == "1" {
		return errors.New("chaos: poison")
	}
	if r.fx != nil { // before the injected failures, which roll it back
		if err := r.fx.apply(msg); err != nil {
			return err
		}
	}
	attempt, _ := strconv.Atoi(msg.Metadata.Get(transport.MetadataAttempt))
	if attempt <= 2 {
		x := r.cfg.rnd()
		switch {
		case x < r.cfg.HandlerPanicRate:
			r.handlerPanics.Add(1)
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("chaos: handler panic: %v", p)
				}
			}()
			panic("chaos: injected handler panic")
		case x < r.cfg.HandlerPanicRate+r.cfg.HandlerErrorRate:
			r.handlerErrs.Add(1)
			return errHandler
		}
	}
	if inst.killed.Load() {
		return errKilled
	}
	r.ledger.Handled(msg.UUID)
	return nil
}

var errKilled = errors.New("chaos: instance killed")

// handleMsg runs handle, through the inbox when effects go through one
// (SQS with Config.Effects).
func (r *runner) handleMsg(inst *instance, msg *message.Message) error {
	if r.fx == nil || r.fx.in == nil {
		return r.handle(inst, msg)
	}
	_, err := r.fx.in.Middleware(func(m *message.Message) ([]*message.Message, error) {
		return nil, r.handle(inst, m)
	})(msg)
	return err
}

// handleInBatch is handleMsg for one message of a batch: with effects in
// the handler's transaction, the message settles inside it at once
// (transport.CommitTx), or its transaction is rolled back, before the
// next message's begins; held to the end of the batch, sixteen open
// transactions would wait for connections they hold themselves (SQLite
// has one per instance).
func (r *runner) handleInBatch(inst *instance, msg *message.Message) error {
	err := r.handleMsg(inst, msg)
	if r.fx == nil || r.fx.in != nil {
		return err
	}
	if err == nil {
		return transport.CommitTx(msg.Context())
	}
	if tx, terr := transport.TxFromContext(msg.Context()); terr == nil {
		_ = tx.Rollback() // the nack that follows finds it done
	}
	return err
}

func (r *runner) startInstance(ctx context.Context, slot int) error {
	r.mu.Lock()
	gen := r.restarts
	r.mu.Unlock()
	id := fmt.Sprintf("i%d-%d", slot, gen)
	sub, lk, err := r.b.instance(ctx, id, r.pcfg)
	if err != nil {
		return err
	}
	if err := sub.SubscribeInitialize(r.topic); err != nil {
		_ = sub.Close()
		lk.close()
		return fmt.Errorf("chaos: initialize: %w", err)
	}
	hh, err := health.NewHandler(health.Config{StartupGrace: 10 * time.Second, MaxConsecutiveFailures: 3, StaleReceive: 30 * time.Second})
	if err != nil {
		return err
	}
	_ = hh.AddSource(id, sub)
	cctx, cancel := context.WithCancel(context.Background())
	inst := &instance{id: id, batch: slot%2 == 1, sub: sub, link: lk, health: hh, dead: make(chan struct{}), cancel: cancel}
	ch, err := sub.Subscribe(subopt.With(cctx, subopt.Options{
		WrapSource: func(src transport.Source) transport.Source { return transporttest.FaultySource(src, r.faults) },
		WrapLogger: func(l watermill.LoggerAdapter) watermill.LoggerAdapter {
			return transporttest.PanickingLogger(l, r.faults)
		},
	}), r.topic)
	if err != nil {
		cancel()
		_ = sub.Close()
		lk.close()
		return fmt.Errorf("chaos: subscribe: %w", err)
	}
	if inst.batch {
		inst.done.Add(1)
		go func() {
			defer inst.done.Done()
			_ = batching.Consume(cctx, ch, batching.Config{MaxSize: 16, MaxWait: 20 * time.Millisecond, Concurrency: 2, FlushTimeout: 3 * time.Second},
				func(_ context.Context, msgs []*message.Message) error {
					if inst.killed.Load() {
						<-inst.dead // a dead process settles nothing
						return errKilled
					}
					var failed []int
					for i, m := range msgs {
						if r.handleInBatch(inst, m) != nil {
							failed = append(failed, i)
						}
					}
					if len(failed) > 0 {
						return batching.Fail(errHandler, failed...)
					}
					return nil
				})
		}()
	} else {
		for range 8 {
			inst.done.Add(1)
			go func() {
				defer inst.done.Done()
				for msg := range ch {
					if inst.killed.Load() {
						select { // abandon: neither ack nor nack
						case <-inst.dead:
						case <-cctx.Done():
						}
						continue
					}
					if r.handleMsg(inst, msg) != nil {
						msg.Nack()
					} else {
						msg.Ack()
					}
				}
			}()
		}
	}
	r.mu.Lock()
	for len(r.live) <= slot {
		r.live = append(r.live, nil)
	}
	r.live[slot] = inst
	r.mu.Unlock()
	return nil
}

func (r *runner) links() []link {
	r.mu.Lock()
	defer r.mu.Unlock()
	ls := make([]link, 0, len(r.live))
	for _, in := range r.live {
		if in != nil {
			ls = append(ls, in.link)
		}
	}
	return ls
}

// inject runs one fault: start it, hold it for FaultLength (lasting kinds),
// end it, then measure recovery.
func (r *runner) inject(ctx context.Context, k Kind) (FaultRecord, error) {
	fr := FaultRecord{Kind: k, At: time.Now(), Recovery: -1}
	seen := map[string]bool{}
	watch := func(until time.Time) {
		for time.Now().Before(until) {
			for _, h := range r.healthReasons(ctx) {
				seen[h] = true
			}
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return
			}
		}
	}
	switch {
	case k == KindKill:
		slot := int(r.cfg.rnd() * float64(r.cfg.Instances))
		r.mu.Lock()
		inst := r.live[slot]
		r.live[slot] = nil
		r.zombies = append(r.zombies, inst)
		r.restarts++
		r.mu.Unlock()
		inst.killed.Store(true)
		inst.link.kill()
		fr.Detail = "killed " + inst.id
		watch(time.Now().Add(r.cfg.FaultLength))
		if err := r.startInstance(ctx, slot); err != nil {
			return fr, fmt.Errorf("restart: %w", err)
		}
	case strings.HasPrefix(string(k), string(KindBerthPrefix)):
		p := transporttest.Point(strings.TrimPrefix(string(k), string(KindBerthPrefix)))
		inj := r.faults
		before := inj.Hits(p)
		inj.Panic(p, 1)
		// Held until it fires (or FaultLength passes), so that recovery
		// is measured from the panic.
		for until := time.Now().Add(r.cfg.FaultLength); time.Now().Before(until) && inj.Hits(p) == before; {
			for _, h := range r.healthReasons(ctx) {
				seen[h] = true
			}
			if !sleepCtx(ctx, 5*time.Millisecond) {
				break
			}
		}
		inj.Panic(p, 0) // disarm
		if inj.Hits(p) > before {
			fr.Detail = "panic fired"
		} else {
			fr.Detail = notReached
		}
	default:
		detail, end, err := r.b.inject(ctx, k, r.links(), r.cfg.rnd)
		if err != nil {
			return fr, err
		}
		fr.Detail = detail
		watch(time.Now().Add(r.cfg.FaultLength))
		end()
	}
	fr.Ended = time.Now()
	r.logf("fault %s (%s) ended", k, fr.Detail)

	// Recovery: progress resumed after the fault ended and every listener
	// reports healthy.
	_, base := r.ledger.Progress()
	deadline := fr.Ended.Add(60 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		reasons := r.healthReasons(ctx)
		healthy := len(reasons) == 0
		for _, h := range reasons {
			seen[h] = true
		}
		_, now := r.ledger.Progress()
		progressed := now > base || r.ledger.Outstanding() == 0
		if healthy && progressed {
			fr.Recovery = time.Since(fr.Ended)
			break
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	for h := range seen {
		fr.Health = append(fr.Health, h)
	}
	if fr.Recovery < 0 {
		r.logf("fault %s: no recovery within 60s", k)
	}
	return fr, nil
}

// healthReasons returns the non-ok health reasons of the live instances'
// listeners ("" when all are healthy).
func (r *runner) healthReasons(ctx context.Context) []string {
	r.mu.Lock()
	insts := append([]*instance(nil), r.live...)
	r.mu.Unlock()
	var out []string
	for _, in := range insts {
		if in == nil {
			continue
		}
		rep := in.health.Report(ctx)
		for _, l := range rep.Listeners {
			if l.Health != health.Healthy {
				out = append(out, string(l.Reason))
			}
		}
		if len(rep.Listeners) == 0 {
			out = append(out, "no_listener")
		}
	}
	return out
}

// shutdown closes live instances gracefully and zombies (killed ones)
// after releasing their blocked handlers. Idempotent.
func (r *runner) shutdown() {
	r.mu.Lock()
	live, zombies := r.live, r.zombies
	r.live, r.zombies = nil, nil
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range append(live, zombies...) {
		if in == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			close(in.dead)
			_ = in.sub.Close()
			in.cancel()
			in.done.Wait()
			in.link.close()
		}()
	}
	wg.Wait()
}

// Fprint is Report.Print for a list of reports.
func Fprint(w io.Writer, reps ...*Report) {
	for _, r := range reps {
		r.Print(w)
		fmt.Fprintln(w)
	}
}
