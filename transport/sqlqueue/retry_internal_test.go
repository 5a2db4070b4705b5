package sqlqueue

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

var (
	errTransient = errors.New("transient")
	errLasting   = errors.New("lasting")
	errAmbiguous = errors.New("transient, may have committed")
)

func isTransient(err error) bool {
	return errors.Is(err, errTransient) || errors.Is(err, errAmbiguous)
}

// sleeps records the backoff's waits instead of sleeping; each call may
// run a hook (cancel a context).
type sleeps struct {
	waits []time.Duration
	hook  func()
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.waits = append(s.waits, d)
	if s.hook != nil {
		s.hook()
	}
	return ctx.Err()
}

// calls returns an operation that fails with errs in turn, then succeeds,
// and counts its runs.
func calls(n *int, errs ...error) func() error {
	return func() error {
		*n++
		if *n <= len(errs) {
			return errs[*n-1]
		}
		return nil
	}
}

func TestBackoffRunsAgainUpToAttemptsWithGrowingWaits(t *testing.T) {
	s := &sleeps{}
	b := backoff{attempts: 5, base: 10 * time.Millisecond, max: 25 * time.Millisecond, sleep: s.sleep}
	runs, retried := 0, 0
	err := b.run(context.Background(), isTransient, nil, func(error) { retried++ },
		calls(&runs, errTransient, errTransient, errTransient, errTransient, errTransient, errTransient, errTransient))
	if !errors.Is(err, errTransient) || runs != 6 || retried != 5 {
		t.Fatalf("err %v after %d runs, %d retried; want the transient error after 6 runs, 5 retried", err, runs, retried)
	}
	caps := []time.Duration{10, 20, 25, 25, 25}
	if len(s.waits) != len(caps) {
		t.Fatalf("waited %v, want %d waits", s.waits, len(caps))
	}
	for i, w := range s.waits {
		d := caps[i] * time.Millisecond
		if w < d/2 || w > d {
			t.Errorf("wait %d = %v, want within [%v, %v]", i, w, d/2, d)
		}
	}
}

func TestBackoffStopsAtFirstSuccess(t *testing.T) {
	s := &sleeps{}
	b := backoff{attempts: 3, base: time.Millisecond, max: time.Second, sleep: s.sleep}
	runs, retried := 0, 0
	var cause error
	err := b.run(context.Background(), isTransient, nil, func(err error) { retried++; cause = err }, calls(&runs, errTransient))
	if err != nil || runs != 2 || retried != 1 || len(s.waits) != 1 || !errors.Is(cause, errTransient) {
		t.Fatalf("err %v, %d runs, %d retried (cause %v), %d waits; want nil, 2, 1 (transient), 1", err, runs, retried, cause, len(s.waits))
	}
}

func TestBackoffDoesNotRunAgainAfterLastingError(t *testing.T) {
	s := &sleeps{}
	b := backoff{attempts: 3, base: time.Millisecond, max: time.Second, sleep: s.sleep}
	runs := 0
	err := b.run(context.Background(), isTransient, nil, func(error) { t.Error("retried a lasting error") }, calls(&runs, errLasting))
	if !errors.Is(err, errLasting) || runs != 1 || len(s.waits) != 0 {
		t.Fatalf("err %v after %d runs, %d waits; want the lasting error after 1 run, no wait", err, runs, len(s.waits))
	}
}

func TestBackoffStopsWhenContextEnds(t *testing.T) {
	// Cancelled during the wait: no new run, the statement's error returned.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &sleeps{hook: cancel}
	b := backoff{attempts: 3, base: time.Millisecond, max: time.Second, sleep: s.sleep}
	runs := 0
	err := b.run(ctx, isTransient, nil, func(error) { t.Error("ran again after the context ended") }, calls(&runs, errTransient, errTransient))
	if !errors.Is(err, errTransient) || runs != 1 || len(s.waits) != 1 {
		t.Fatalf("err %v after %d runs, %d waits; want the transient error after 1 run, 1 wait", err, runs, len(s.waits))
	}

	// Already over when the statement failed: no wait at all.
	s = &sleeps{}
	b.sleep = s.sleep
	runs = 0
	err = b.run(ctx, isTransient, nil, func(error) { t.Error("ran again after the context ended") }, calls(&runs, errTransient))
	if !errors.Is(err, errTransient) || runs != 1 || len(s.waits) != 0 {
		t.Fatalf("err %v after %d runs, %d waits; want the transient error after 1 run, no wait", err, runs, len(s.waits))
	}
}

// The real sleep returns when the context ends, not after the duration.
func TestSleepCtxReturnsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sleepCtx(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("sleepCtx on a cancelled context = %v, want context.Canceled", err)
	}
	if err := sleepCtx(context.Background(), 0); err != nil {
		t.Fatalf("sleepCtx(0) = %v", err)
	}
}

// classifying is a dialect that classifies the test errors: errTransient
// guarantees nothing committed, errAmbiguous does not.
type classifying struct{ Dialect }

func (classifying) IsTransient(err error) bool { return isTransient(err) }
func (classifying) NotCommitted(err error) bool {
	return errors.Is(err, errTransient)
}

// logs records a logger's calls; with panics set, every call panics after
// being recorded.
type logs struct {
	mu     sync.Mutex
	lines  []string
	fields []watermill.LogFields
	panics bool
}

func (l *logs) log(level, msg string, f watermill.LogFields) {
	l.mu.Lock()
	l.lines = append(l.lines, level+" "+msg)
	l.fields = append(l.fields, f)
	l.mu.Unlock()
	if l.panics {
		panic("logger broke")
	}
}
func (l *logs) Error(msg string, err error, f watermill.LogFields) { l.log("error", msg, f) }
func (l *logs) Info(msg string, f watermill.LogFields)             { l.log("info", msg, f) }
func (l *logs) Debug(msg string, f watermill.LogFields)            { l.log("debug", msg, f) }
func (l *logs) Trace(msg string, f watermill.LogFields)            { l.log("trace", msg, f) }
func (l *logs) With(watermill.LogFields) watermill.LoggerAdapter   { return l }

func testEngine(d Dialect) (*engine, *sleeps) {
	s := &sleeps{}
	b := defaultBackoff
	b.sleep = s.sleep
	return &engine{d: d, ctrs: &Counters{}, backoff: b}, s
}

func TestEngineRetryCountsAndLogsOnce(t *testing.T) {
	e, _ := testEngine(classifying{})
	l := &logs{}
	runs := 0
	if err := e.retry(context.Background(), l, "complete", idempotent, calls(&runs, errTransient, errAmbiguous)); err != nil {
		t.Fatal(err)
	}
	if runs != 3 || e.ctrs.Snapshot().StatementRetries != 2 {
		t.Fatalf("%d runs, StatementRetries %d; want 3, 2", runs, e.ctrs.Snapshot().StatementRetries)
	}
	if len(l.lines) != 1 || l.fields[0]["retries"] != 2 || l.fields[0]["statement"] != "complete" {
		t.Fatalf("logged %q %v; want one line with retries 2 for complete", l.lines, l.fields)
	}

	// Giving up is logged once too, and the last error returned.
	l = &logs{}
	runs = 0
	err := e.retry(context.Background(), l, "begin", idempotent, calls(&runs, errTransient, errTransient, errTransient, errTransient, errTransient))
	if !errors.Is(err, errTransient) || runs != 1+retryAttempts || len(l.lines) != 1 || l.fields[0]["last_error"] == nil {
		t.Fatalf("err %v after %d runs, logged %q %v; want the error after %d runs, logged once with last_error", err, runs, l.lines, l.fields, 1+retryAttempts)
	}

	// Nothing logged when the first run succeeds.
	l = &logs{}
	if err := e.retry(context.Background(), l, "renew", idempotent, func() error { return nil }); err != nil || len(l.lines) != 0 {
		t.Fatalf("err %v, logged %q; want nil, nothing", err, l.lines)
	}
}

// An insert runs again only after an error that guarantees it did not
// commit.
func TestEngineRetryNotCommittedOnly(t *testing.T) {
	e, _ := testEngine(classifying{})
	runs := 0
	if err := e.retry(context.Background(), &logs{}, "publish", notCommitted, calls(&runs, errTransient)); err != nil || runs != 2 {
		t.Fatalf("after a rolled-back error: err %v, %d runs; want nil, 2", err, runs)
	}
	runs = 0
	err := e.retry(context.Background(), &logs{}, "publish", notCommitted, calls(&runs, errAmbiguous))
	if !errors.Is(err, errAmbiguous) || runs != 1 {
		t.Fatalf("after a maybe-committed error: err %v, %d runs; want it returned after 1 run", err, runs)
	}
}

// A dialect that does not classify errors gets one run.
func TestEngineRetryNeedsClassifier(t *testing.T) {
	e, s := testEngine(struct{ Dialect }{})
	runs := 0
	err := e.retry(context.Background(), &logs{}, "claim", idempotent, calls(&runs, errTransient))
	if !errors.Is(err, errTransient) || runs != 1 || len(s.waits) != 0 {
		t.Fatalf("err %v after %d runs; want the error after 1 run", err, runs)
	}
}

// A logger that panics does not take the operation down.
func TestEngineRetryLogPanicIsContained(t *testing.T) {
	e, _ := testEngine(classifying{})
	l := &logs{panics: true}
	runs := 0
	if err := e.retry(context.Background(), l, "sweep", idempotent, calls(&runs, errTransient)); err != nil {
		t.Fatal(err)
	}
	if runs != 2 || len(l.lines) != 1 {
		t.Fatalf("%d runs, %d log calls; want 2, 1", runs, len(l.lines))
	}
}

func TestConnectionLostAndNotSent(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	read := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	cases := []struct {
		name          string
		err           error
		lost, notSent bool
	}{
		{"nil", nil, false, false},
		{"bad conn", fmt.Errorf("claim: %w", driver.ErrBadConn), true, true},
		{"dial refused", dial, true, true},
		{"reset mid-statement", read, true, false},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, false},
		{"EOF", io.EOF, true, false},
		{"closed", net.ErrClosed, true, false},
		{"broken pipe", syscall.EPIPE, true, false},
		{"read timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, false, false},
		{"cancelled", fmt.Errorf("%w: %w", context.Canceled, driver.ErrBadConn), false, false},
		{"deadline", context.DeadlineExceeded, false, false},
		{"other", errLasting, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ConnectionLost(c.err); got != c.lost {
				t.Errorf("ConnectionLost = %v, want %v", got, c.lost)
			}
			if got := NotSent(c.err); got != c.notSent {
				t.Errorf("NotSent = %v, want %v", got, c.notSent)
			}
		})
	}
}

var errOutage = errors.New("outage: the database is failing over")

func isOutage(err error) bool { return errors.Is(err, errOutage) }

// An outage is waited out with the outage policy (seconds, doubling to
// the cap, jittered) for as long as the context lasts, however many runs
// that takes; a brief error after it still has its three runs.
func TestBackoffWaitsOutAnOutageUntilTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	s := &sleeps{}
	b := defaultBackoff
	b.sleep = s.sleep
	retryable := func(err error) bool { return isTransient(err) || isOutage(err) }
	errs := make([]error, 8)
	for i := range errs {
		errs[i] = errOutage
	}
	errs = append(errs, errTransient, errTransient) // two brief ones after it
	runs := 0
	err := b.run(ctx, retryable, isOutage, func(error) {}, calls(&runs, errs...))
	if err != nil || runs != len(errs)+1 {
		t.Fatalf("err %v after %d runs; want success after %d runs", err, runs, len(errs)+1)
	}
	caps := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second,
		retryBase, 2 * retryBase}
	if len(s.waits) != len(caps) {
		t.Fatalf("waited %v, want %d waits", s.waits, len(caps))
	}
	for i, w := range s.waits {
		if d := caps[i]; w < d/2 || w > d {
			t.Errorf("wait %d = %v, want within [%v, %v]", i, w, d/2, d)
		}
	}

	// Without an outage classifier the same errors get three runs more.
	s.waits, runs = nil, 0
	err = b.run(ctx, retryable, nil, func(error) {}, calls(&runs, errs...))
	if !errors.Is(err, errOutage) || runs != 1+retryAttempts {
		t.Fatalf("without outage classes: err %v after %d runs; want the outage after %d runs", err, runs, 1+retryAttempts)
	}
}

// An outage that lasts past the context's deadline ends the operation with
// the last error when the wait is cut short; with no deadline at all, the
// waits add up to outageFor.
func TestBackoffOutageEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	s := &sleeps{}
	s.hook = func() {
		if len(s.waits) == 3 {
			cancel() // the deadline passes during the third wait
		}
	}
	b := defaultBackoff
	b.sleep = s.sleep
	runs := 0
	always := func() error { runs++; return errOutage }
	err := b.run(ctx, isOutage, isOutage, func(error) {}, always)
	if !errors.Is(err, errOutage) || runs != 3 || len(s.waits) != 3 {
		t.Fatalf("err %v after %d runs, %d waits; want the outage after 3 runs, 3 waits", err, runs, len(s.waits))
	}

	s = &sleeps{}
	b.sleep = s.sleep
	runs = 0
	err = b.run(context.Background(), isOutage, isOutage, func(error) {}, always)
	var total time.Duration
	for _, w := range s.waits {
		total += w
	}
	if !errors.Is(err, errOutage) || total != outageFor || runs != len(s.waits)+1 {
		t.Fatalf("no deadline: err %v after %d runs, waited %v in %d waits; want the outage after %v of waits", err, runs, total, len(s.waits), outageFor)
	}
}

// outageDialect classifies errOutage as a transient outage that did not
// commit.
type outageDialect struct{ classifying }

func (outageDialect) IsTransient(err error) bool { return isTransient(err) || isOutage(err) }
func (outageDialect) NotCommitted(err error) bool {
	return errors.Is(err, errTransient) || isOutage(err)
}
func (outageDialect) IsOutage(err error) bool { return isOutage(err) }

// Settlements and inserts outlast an outage; claims, sweeps and schema
// work (retry) get their three runs.
func TestEngineRetryOutlastingOnlyWhereAsked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	e, s := testEngine(outageDialect{})
	errs := []error{errOutage, errOutage, errOutage, errOutage, errOutage}
	runs := 0
	if err := e.retryOutlasting(ctx, &logs{}, "complete", idempotent, calls(&runs, errs...)); err != nil || runs != 6 {
		t.Fatalf("outlasting: err %v after %d runs; want success after 6", err, runs)
	}
	if s.waits[0] < outageBase/2 {
		t.Fatalf("first wait %v, want the outage policy's (at least %v)", s.waits[0], outageBase/2)
	}
	runs = 0
	if err := e.retryOutlasting(ctx, &logs{}, "publish", notCommitted, calls(&runs, errs...)); err != nil || runs != 6 {
		t.Fatalf("outlasting insert: err %v after %d runs; want success after 6", err, runs)
	}
	runs = 0
	if err := e.retry(ctx, &logs{}, "claim", idempotent, calls(&runs, errs...)); !errors.Is(err, errOutage) || runs != 1+retryAttempts {
		t.Fatalf("claim: err %v after %d runs; want the outage after %d", err, runs, 1+retryAttempts)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
