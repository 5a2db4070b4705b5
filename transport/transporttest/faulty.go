package transporttest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// A Point names a place where a fault is injected: a method of the source
// (FaultySource) or the logger (PanickingLogger).
type Point string

// The injection points.
const (
	AtReceive    Point = "receive"     // Source.Claim
	AtMap        Point = "map"         // Source.Map
	AtBegin      Point = "begin"       // Source.Begin, the lease gate
	AtAck        Point = "ack"         // Source.Complete
	AtNack       Point = "nack"        // Source.Retry
	AtDeadLetter Point = "dead-letter" // Source.DeadLetter
	AtRelease    Point = "release"     // Source.Release
	AtLog        Point = "log"         // a logger call
)

// Points lists every injection point.
var Points = []Point{AtReceive, AtMap, AtBegin, AtAck, AtNack, AtDeadLetter, AtRelease, AtLog}

// Injected is the value of an injected panic and the error of an injected
// error.
type Injected struct{ Point Point }

// Error names the injection point.
func (e *Injected) Error() string { return fmt.Sprintf("transporttest: injected at %s", e.Point) }

// A Faults injects faults at points, a given number of times each; one
// value serves one test (nothing is process-wide), and is safe for
// concurrent use.
type Faults struct {
	mu     sync.Mutex
	panics map[Point]int
	errs   map[Point]int
	hits   map[Point]int
}

// NewFaults returns a Faults that injects nothing yet.
func NewFaults() *Faults {
	return &Faults{panics: map[Point]int{}, errs: map[Point]int{}, hits: map[Point]int{}}
}

// Panic makes the next times calls at p panic with an *Injected.
func (f *Faults) Panic(p Point, times int) *Faults {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.panics[p] = times
	return f
}

// Error makes the next times calls at p return an *Injected.
func (f *Faults) Error(p Point, times int) *Faults {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[p] = times
	return f
}

// Hits returns how many faults were injected at p.
func (f *Faults) Hits(p Point) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[p]
}

// hit panics or returns an error if a fault is due at p.
func (f *Faults) hit(p Point) error {
	f.mu.Lock()
	panicking := f.panics[p] > 0
	failing := !panicking && f.errs[p] > 0
	switch {
	case panicking:
		f.panics[p]--
	case failing:
		f.errs[p]--
	default:
		f.mu.Unlock()
		return nil
	}
	f.hits[p]++
	f.mu.Unlock()
	if panicking {
		panic(&Injected{Point: p})
	}
	return &Injected{Point: p}
}

// FaultySource decorates src: each method first lets f inject its fault.
// The optional interfaces (ClaimSizer, Renewer, Waker, WakeHinter) pass
// through: the decorator reports none of them (a zero size, a zero
// interval, a nil channel) where src implements none; so do DirectClaimer
// and AsyncCompleter, falling back to Claim and Complete, so that faults
// reach the paths a source really takes (claims straight into processing,
// group-committed acks). A transport.TxSettler stays one (its CompleteTx is
// an ack: AtAck), and only then.
func FaultySource(src transport.Source, f *Faults) transport.Source {
	fs := &faultySource{Source: src, f: f}
	if ts, ok := src.(transport.TxSettler); ok {
		return &faultyTxSource{faultySource: fs, ts: ts}
	}
	return fs
}

// faultyTxSource is a faultySource of a transport.TxSettler.
type faultyTxSource struct {
	*faultySource
	ts transport.TxSettler
}

func (s *faultyTxSource) BeginTx(ctx context.Context, d *transport.Delivery) (*sql.Tx, error) {
	return s.ts.BeginTx(ctx, d)
}

func (s *faultyTxSource) CompleteTx(ctx context.Context, d *transport.Delivery, tx *sql.Tx) error {
	if err := s.f.hit(AtAck); err != nil {
		_ = tx.Rollback() // CompleteTx leaves tx done, whatever the outcome
		return err
	}
	return s.ts.CompleteTx(ctx, d, tx)
}

type faultySource struct {
	transport.Source
	f *Faults
	// claimedOK: when a Claim of the source last succeeded, Unix ns
	// (LastContact for a source that reports none of its own).
	claimedOK atomic.Int64
}

func (s *faultySource) Claim(ctx context.Context, max int) ([]*transport.Delivery, error) {
	if err := s.f.hit(AtReceive); err != nil {
		return nil, err
	}
	ds, err := s.Source.Claim(ctx, max)
	if err == nil {
		s.claimedOK.Store(time.Now().UnixNano())
	}
	return ds, err
}

// LastContact implements transport.ContactReporter: the source's own, or
// when its Claim last succeeded.
func (s *faultySource) LastContact() time.Time {
	if r, ok := s.Source.(transport.ContactReporter); ok {
		return r.LastContact()
	}
	if ns := s.claimedOK.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// ClaimWait implements transport.LongPoller: the source's own, or 0.
func (s *faultySource) ClaimWait() time.Duration {
	if lp, ok := s.Source.(transport.LongPoller); ok {
		return lp.ClaimWait()
	}
	return 0
}

// ClaimDirect implements transport.DirectClaimer: the source's own when it
// has one (claims straight into processing), else Claim, which starts
// none. A fault at AtReceive comes first either way.
func (s *faultySource) ClaimDirect(ctx context.Context, max, direct int) ([]*transport.Delivery, error) {
	if err := s.f.hit(AtReceive); err != nil {
		return nil, err
	}
	var (
		ds  []*transport.Delivery
		err error
	)
	if dc, ok := s.Source.(transport.DirectClaimer); ok {
		ds, err = dc.ClaimDirect(ctx, max, direct)
	} else {
		ds, err = s.Source.Claim(ctx, max)
	}
	if err == nil {
		s.claimedOK.Store(time.Now().UnixNano())
	}
	return ds, err
}

// CompleteAsync implements transport.AsyncCompleter: the source's own when
// it has one (group-committed acks), else Complete on the caller's
// goroutine. A fault at AtAck comes first either way (a panic on the
// caller's goroutine, an error handed to done).
func (s *faultySource) CompleteAsync(ctx context.Context, d *transport.Delivery, done func(error)) {
	if err := s.f.hit(AtAck); err != nil {
		done(err)
		return
	}
	if ac, ok := s.Source.(transport.AsyncCompleter); ok {
		ac.CompleteAsync(ctx, d, done)
		return
	}
	done(s.Source.Complete(ctx, d))
}

func (s *faultySource) Map(d *transport.Delivery) (*message.Message, error) {
	if err := s.f.hit(AtMap); err != nil {
		return nil, err
	}
	return s.Source.Map(d)
}

func (s *faultySource) Begin(ctx context.Context, d *transport.Delivery) error {
	if err := s.f.hit(AtBegin); err != nil {
		return err
	}
	return s.Source.Begin(ctx, d)
}

func (s *faultySource) Complete(ctx context.Context, d *transport.Delivery) error {
	if err := s.f.hit(AtAck); err != nil {
		return err
	}
	return s.Source.Complete(ctx, d)
}

func (s *faultySource) Retry(ctx context.Context, d *transport.Delivery, delay time.Duration, reason string) error {
	if err := s.f.hit(AtNack); err != nil {
		return err
	}
	return s.Source.Retry(ctx, d, delay, reason)
}

func (s *faultySource) DeadLetter(ctx context.Context, d *transport.Delivery, msg *message.Message, reason string) error {
	if err := s.f.hit(AtDeadLetter); err != nil {
		return err
	}
	return s.Source.DeadLetter(ctx, d, msg, reason)
}

func (s *faultySource) Release(ctx context.Context, ds []*transport.Delivery) error {
	if err := s.f.hit(AtRelease); err != nil {
		return err
	}
	return s.Source.Release(ctx, ds)
}

// MaxClaim implements transport.ClaimSizer.
func (s *faultySource) MaxClaim() int {
	if cs, ok := s.Source.(transport.ClaimSizer); ok {
		return cs.MaxClaim()
	}
	return 0
}

// RenewInterval implements transport.Renewer.
func (s *faultySource) RenewInterval() time.Duration {
	if rn, ok := s.Source.(transport.Renewer); ok {
		return rn.RenewInterval()
	}
	return 0
}

// Renew implements transport.Renewer.
func (s *faultySource) Renew(ctx context.Context, ds []*transport.Delivery) error {
	if rn, ok := s.Source.(transport.Renewer); ok {
		return rn.Renew(ctx, ds)
	}
	return nil
}

// Ping implements transport.Pinger: the source's own, or nil.
func (s *faultySource) Ping(ctx context.Context) error {
	if p, ok := s.Source.(transport.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// Wake implements transport.Waker.
func (s *faultySource) Wake() <-chan struct{} {
	if w, ok := s.Source.(transport.Waker); ok {
		return w.Wake()
	}
	return nil
}

// TakeWakeHint implements transport.WakeHinter.
func (s *faultySource) TakeWakeHint() int {
	if h, ok := s.Source.(transport.WakeHinter); ok {
		return h.TakeWakeHint()
	}
	return 0
}

// PanickingLogger decorates l: its Error and Info calls first let f inject
// a fault at AtLog (a panic, as a faulty log adapter would).
func PanickingLogger(l watermill.LoggerAdapter, f *Faults) watermill.LoggerAdapter {
	return &panickingLogger{LoggerAdapter: l, f: f}
}

type panickingLogger struct {
	watermill.LoggerAdapter
	f *Faults
}

func (l *panickingLogger) Error(msg string, err error, fields watermill.LogFields) {
	_ = l.f.hit(AtLog)
	l.LoggerAdapter.Error(msg, err, fields)
}

func (l *panickingLogger) Info(msg string, fields watermill.LogFields) {
	_ = l.f.hit(AtLog)
	l.LoggerAdapter.Info(msg, fields)
}

func (l *panickingLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return &panickingLogger{LoggerAdapter: l.LoggerAdapter.With(fields), f: l.f}
}

// PanickingObserver is an Observer whose every method panics: the pipeline
// must ignore it (an observer never faults the pipeline).
type PanickingObserver struct{}

func (PanickingObserver) WaveDone(string, int, int, int, error) { panic(errors.New("observer")) }
func (PanickingObserver) Received(string, time.Time, int, error) {
	panic(errors.New("observer"))
}
func (PanickingObserver) Settled(string, transport.SettleOp, *message.Message, int, time.Time, error) {
	panic(errors.New("observer"))
}
func (PanickingObserver) Delivering(context.Context, string, *message.Message) (context.Context, func(transport.Outcome)) {
	panic(errors.New("observer"))
}
func (PanickingObserver) DeadLettered(string, *message.Message, string) {
	panic(errors.New("observer"))
}
func (PanickingObserver) Faulted(string, *transport.Fault) { panic(errors.New("observer")) }
func (PanickingObserver) Rebuilt(string)                   { panic(errors.New("observer")) }
