package sqlqueue

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	ibackoff "github.com/berth-go/berth/internal/backoff"
	"github.com/berth-go/berth/internal/guard"
)

// The statement retry policy (see the package documentation, Statement
// retries): an operation that failed with a transient error runs again up
// to retryAttempts more times, waiting retryBase, then twice as long each
// time up to retryMax, each wait jittered to [d/2, d]. After an outage
// (OutageClassifier: a fail-over, throttling), an operation that outlasts
// outages (settlements, publish inserts) waits outageBase, then twice as
// long each time up to outageMax, jittered alike, and runs again until its
// context ends — or, when that context has no deadline, until it has
// waited outageFor in all.
const (
	retryAttempts = 3
	retryBase     = 10 * time.Millisecond
	retryMax      = 100 * time.Millisecond
	outageBase    = time.Second
	outageMax     = 10 * time.Second
	outageFor     = time.Minute
)

// retrySafety says after which transient errors an operation may run again.
type retrySafety int

const (
	// idempotent operations may run again after any error that
	// TransientClassifier.IsTransient reports, even one after which the
	// first run may have committed: fenced follow-ups (a second run finds
	// the rows already moved and touches none), claims (rows a lost claim
	// took wait for the sweeper), sweeps.
	idempotent retrySafety = iota
	// notCommitted operations (inserts: a second run would insert the
	// messages twice) run again only after an error that
	// TransientClassifier.NotCommitted reports.
	notCommitted
)

// backoff runs an operation again after retryable errors, its waits drawn
// from internal/backoff (imported here as ibackoff).
type backoff struct {
	attempts  int // further runs after the first, after errors other than outages
	base, max time.Duration
	// outageBase and outageMax space the runs after outage errors, which
	// go on until the context ends, or for outageFor in all when it has no
	// deadline.
	outageBase, outageMax, outageFor time.Duration
	// sleep waits d or until ctx is done (then it returns ctx.Err()).
	sleep func(ctx context.Context, d time.Duration) error
}

var defaultBackoff = backoff{attempts: retryAttempts, base: retryBase, max: retryMax,
	outageBase: outageBase, outageMax: outageMax, outageFor: outageFor, sleep: sleepCtx}

// run calls fn, and again after each error that retryable accepts, waiting
// before each run; retried is called before each new run with the error
// that caused it. An error that outage accepts (outage may be nil) is
// waited out with the outage policy for as long as ctx lasts (outageFor,
// when ctx has no deadline); any other is run again at most b.attempts
// times. It stops at once when ctx is done, and returns fn's last error.
func (b backoff) run(ctx context.Context, retryable, outage func(error) bool, retried func(error), fn func() error) error {
	brief := ibackoff.Policy{Base: b.base, Max: b.max}
	long := ibackoff.Policy{Base: b.outageBase, Max: b.outageMax}
	_, bounded := ctx.Deadline()
	var briefN, outageN int
	var waited time.Duration // outage waits so far, for a ctx with no deadline
	for {
		err := fn()
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return err
		}
		var d time.Duration
		if outage != nil && outage(err) {
			d = long.Delay(outageN)
			outageN++
			if !bounded {
				if waited >= b.outageFor {
					return err
				}
				d = min(d, b.outageFor-waited)
				waited += d
			}
		} else {
			if briefN >= b.attempts {
				return err
			}
			d = brief.Delay(briefN)
			briefN++
		}
		if b.sleep(ctx, d) != nil {
			return err
		}
		retried(err)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retry runs fn under the engine's backoff when the dialect classifies
// errors (TransientClassifier), once otherwise. Each new run counts in
// Stats.StatementRetries; an operation that ran more than once is logged
// once, when it ends, through logger. op names the operation in the log.
// fn must start afresh on every call (reset what it collects) and, when it
// runs several statements, run them in one transaction: a failed
// transaction is run again whole, never from the statement that failed.
// An outage error (OutageClassifier) is run again like any other, at most
// retryAttempts times: claims, sweeps and schema work have loops of their
// own to come back after an outage (see retryOutlasting).
func (e *engine) retry(ctx context.Context, logger watermill.LoggerAdapter, op string, safety retrySafety, fn func() error) error {
	return e.retryWith(ctx, logger, op, safety, false, fn)
}

// retryOutlasting is retry for the operations that must outlast an outage
// (settlements, publish inserts): after an error the dialect's
// OutageClassifier reports, fn runs again with the outage backoff until ctx
// ends (see backoff.run), so a fail-over of seconds does not fail every ack
// in flight.
func (e *engine) retryOutlasting(ctx context.Context, logger watermill.LoggerAdapter, op string, safety retrySafety, fn func() error) error {
	return e.retryWith(ctx, logger, op, safety, true, fn)
}

func (e *engine) retryWith(ctx context.Context, logger watermill.LoggerAdapter, op string, safety retrySafety, outlast bool, fn func() error) error {
	c, ok := e.d.(TransientClassifier)
	if !ok {
		return fn()
	}
	retryable := c.IsTransient
	if safety == notCommitted {
		retryable = c.NotCommitted
	}
	var outage func(error) bool
	if oc, ok := e.d.(OutageClassifier); ok && outlast {
		outage = oc.IsOutage
	}
	retries := 0
	var first error
	err := e.backoff.run(ctx, retryable, outage, func(err error) {
		if retries == 0 {
			first = err
		}
		retries++
		e.ctrs.statementRetries.Add(1)
	}, fn)
	if retries > 0 {
		fields := watermill.LogFields{"statement": op, "retries": retries, "first_error": first.Error()}
		msg := "statement succeeded after a transient database error"
		if err != nil {
			msg = "statement still failing after retrying a transient database error"
			fields["last_error"] = err.Error()
		}
		// A logger that panics must not take the caller (a settlement,
		// the sweeper's goroutine) down with it.
		guard.Do(func() { logger.Info(msg, fields) })
	}
	return err
}

// ConnectionLost reports whether err says the connection to the database
// broke or could not be made: driver.ErrBadConn, an unexpected end of the
// stream, a reset, aborted, refused or closed connection, or any other
// network error but a read or write timeout (which may be a statement
// that runs too long, not a lost connection). A statement whose connection
// was lost may have committed before the reply was lost. Context errors are
// never a lost connection. Dialects use it in
// TransientClassifier.IsTransient.
func ConnectionLost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if NotSent(err) {
		return true
	}
	for _, target := range []error{io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
		syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE} {
		if errors.Is(err, target) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && !ne.Timeout()
}

// NotSent reports whether err says the statement never reached the
// database: driver.ErrBadConn (database/sql's contract: a driver returns it
// only when nothing was sent on the connection), a refused connection or
// a failed dial. Dialects use it in TransientClassifier.NotCommitted.
func NotSent(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}
