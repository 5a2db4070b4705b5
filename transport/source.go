package transport

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// A Source is the only thing a transport implements on the receive side. It
// claims raw deliveries from a broker and settles them; the shared pipeline
// (package receiver) owns everything else: the receive
// loop, the bounded buffer, concurrency permits, mapping, delivery to
// Watermill, retries and dead-lettering decisions.
//
// All methods may be called concurrently. Settlement methods (Begin,
// Complete, Retry, Release, DeadLetter) are called at most once per delivery
// in the order Begin → (Complete | Retry | DeadLetter), or Release alone for a
// delivery that never reached user code; a delivery a DirectClaimer claimed
// already started skips Begin. A source is free to coalesce
// concurrent calls into batched broker requests (one DELETE for many acks, one
// DeleteMessageBatch for ten), as long as each call returns the outcome of its
// own delivery.
type Source interface {
	// Claim claims at most max deliveries (max ≥ 1) that are due now. It
	// returns an empty slice, not an error, when nothing is available. A
	// long-polling source may block until ctx is done or a message arrives.
	// Claimed deliveries are leased to this source until settled or released.
	Claim(ctx context.Context, max int) ([]*Delivery, error)

	// Map turns a claimed delivery into a Watermill message. The pipeline
	// drops the raw payload (Delivery.Raw) right after a successful Map. A
	// non-nil error sends the delivery to DeadLetter with the error as the
	// reason, with Raw still set.
	Map(d *Delivery) (*message.Message, error)

	// Begin is the lease gate. It runs after the delivery has a concurrency
	// permit and before any user code sees the message. It returns
	// ErrLeaseLost when the delivery is no longer owned by this claim (the
	// pipeline then drops it without running user code). A source that counts
	// attempts when processing starts updates d.Attempt here.
	Begin(ctx context.Context, d *Delivery) error

	// Complete removes a successfully handled delivery (the ack).
	Complete(ctx context.Context, d *Delivery) error

	// Retry makes a nacked delivery available again after delay. reason
	// is why the attempt failed ("" when the handler recorded none); a
	// source that can change the message it redelivers appends the
	// attempt's AttemptLine to its MetadataAttemptErrors.
	Retry(ctx context.Context, d *Delivery, delay time.Duration, reason string) error

	// Release returns deliveries that never reached user code to the broker
	// untouched: no attempt is counted and they are available at once.
	Release(ctx context.Context, ds []*Delivery) error

	// DeadLetter moves a delivery to the dead-letter destination with a
	// reason. msg is the mapped message, or nil when mapping failed (then
	// d.Raw still holds the raw payload).
	DeadLetter(ctx context.Context, d *Delivery, msg *message.Message, reason string) error

	// Close releases the source's resources. Deliveries still leased are
	// left to the broker's lease or visibility expiry.
	Close(ctx context.Context) error
}

// A Delivery is one raw message claimed from a broker.
type Delivery struct {
	// ID identifies the delivery at the broker (a row id, an SQS message
	// id). It is used in logs and dead-letter records.
	ID string

	// Attempt is the 1-based delivery attempt, as counted by the broker
	// (SQS ApproximateReceiveCount, a SQL attempts column). Sources that count
	// attempts at Begin set it there.
	Attempt int

	// Handle is the source's own settlement token (receipt handle, owner
	// token and row id). The pipeline never looks inside it.
	Handle any

	// Raw is the source's raw payload (an SQS body string and attributes, a
	// SQL row's buffers). The pipeline sets it to nil once Map has succeeded,
	// so the broker payload is not retained next to the mapped message.
	Raw any

	// Started is set by a DirectClaimer on a delivery it claimed straight
	// into processing: its lease gate is passed (attempt counted, processing
	// lease set), so the pipeline does not call Begin for it.
	Started bool
}

// A DirectClaimer is a Source that can claim deliveries straight into
// processing, so that a delivery claimed for a concurrency permit that is
// free at that moment costs no separate lease gate (Begin). The lease gate
// protects deliveries that wait in the buffer; one that goes to user code at
// once does not wait.
//
// The receive loop reserves the permits free at claim time and calls
// ClaimDirect with their number; it hands each started delivery to user code
// on one of them at once and buffers the rest, which pass the lease gate as
// usual. A started delivery that never reaches user code (the stage stopped
// first) is given to Release, which must then undo the attempt it counted.
type DirectClaimer interface {
	// ClaimDirect is Claim, except that at most direct (0 ≤ direct ≤ max)
	// of the returned deliveries, the first in claim order, may already be
	// started: Delivery.Started set, Attempt counting this attempt, the
	// processing lease running. With direct 0 it is Claim.
	ClaimDirect(ctx context.Context, max, direct int) ([]*Delivery, error)
}

// An AsyncCompleter is a Source whose ack can be started without its caller
// waiting for the outcome: a source that group-commits acks (one DELETE for
// many) would otherwise park one goroutine per ack until its batch's
// statement returns. The pipeline uses it for an ack whose permit has
// already gone to the next delivery (it settles on a settle slot); the
// goroutine that processed the message goes on to the next one at once.
type AsyncCompleter interface {
	// CompleteAsync is Complete with the outcome handed to done, called
	// exactly once: on a goroutine of the source's choosing, possibly the
	// caller's before CompleteAsync returns. done is quick and never blocks.
	CompleteAsync(ctx context.Context, d *Delivery, done func(error))
}

// ClaimSizer is implemented by sources whose Claim returns at most a fixed
// number of deliveries per call (SQS: 10). The receive loop then launches a
// wave of concurrent Claims, one per probe. Sources without it (SQL) claim a
// whole wave in one call, each row counting as a probe.
type ClaimSizer interface {
	MaxClaim() int
}

// Renewer is implemented by sources whose leases expire (SQS visibility
// timeout, SQL processing lease). The pipeline calls Renew with every
// delivery that user code still holds, once per RenewInterval.
type Renewer interface {
	RenewInterval() time.Duration
	// Renew extends the leases of ds. It returns ErrLeaseLost (possibly
	// wrapped, possibly joined) for deliveries whose lease is gone.
	Renew(ctx context.Context, ds []*Delivery) error
}

// A Sequencer is implemented by sources whose Claim can return several
// deliveries that must be handled one after another: one ReceiveMessage on
// an SQS FIFO queue may return several messages of one message group. The
// pipeline then has at most one delivery per key in flight, in claim order:
// a key's later deliveries stay in the buffer (they count toward it, and
// their leases are renewed with the in-flight ones) until the earlier one
// is acknowledged, and when it is settled any other way (retried,
// dead-lettered, handed back, lost) they are released untouched, so that
// they never overtake it. Deliveries without a key dispatch as before.
// Sources whose Claim already hands out only one delivery per key (the SQL
// transports, mem://) do not implement it.
type Sequencer interface {
	// SequenceKey returns d's key, or "" when d has none.
	SequenceKey(d *Delivery) string
}

// A Pinger is a Source that can tell cheaply whether its broker answers
// (one round trip on a pooled connection). A receive loop backing off
// after receive errors pings it once a second, and claims again as soon as
// a ping succeeds after one failed: a broker that was unreachable is read
// again within about a second of answering, not after the rest of the
// backoff (up to MaxErrorDelay). Errors the broker itself returns, while
// pings succeed, keep their backoff.
//
// A listener also pings a Pinger source when it has not heard from the
// broker for receiver.Config.ContactInterval (an idle SQL queue claims
// without a round trip), so that health learns of a broker that stopped
// answering within seconds (ListenerState.LastContact, ContactFailing).
type Pinger interface {
	Ping(ctx context.Context) error
}

// A ContactReporter is a Source whose Claim may answer without the broker
// (an idle SQL queue, parked, answers empty until a wake-up), or whose
// other calls reach the broker too. LastContact is when the broker last
// answered any call of the source (zero: never); the listener uses it
// instead of counting its successful Claims as contact.
type ContactReporter interface {
	LastContact() time.Time
}

// A LongPoller is a Source whose Claim waits at the broker up to ClaimWait
// for messages to arrive (SQS long polling): a Claim outstanding for less
// than that is not late, and the listener does not ping meanwhile.
type LongPoller interface {
	ClaimWait() time.Duration
}

// Waker is implemented by sources that can tell the receive loop that new
// messages may have arrived (PostgreSQL LISTEN/NOTIFY, an in-process
// publisher), so an idle loop wakes before its empty delay ends.
type Waker interface {
	// Wake returns a channel that receives a value when messages may be
	// available. It is read by one listener only.
	Wake() <-chan struct{}
}

// A WakeHinter is a Waker that can tell how many messages its wake-ups
// announced since it was last asked (for example, how many notifications
// were coalesced into one wake-up). The receive loop answers such a wake-up
// with a wave of that size instead of a single probe: the broker pushed the
// information, nobody asked for a count.
type WakeHinter interface {
	// TakeWakeHint returns the number announced since the last call (0
	// when unknown) and resets it.
	TakeWakeHint() int
}

// Sentinel errors shared by every transport. Callers branch on them with
// errors.Is.
var (
	// ErrClosed is returned by operations on a closed publisher, subscriber
	// or listener.
	ErrClosed = errors.New("berth: closed")

	// ErrLeaseLost means a delivery is no longer owned by the claim that
	// fetched it (another instance took it over, or its lease expired).
	ErrLeaseLost = errors.New("berth: lease lost")

	// ErrInvalidConfig wraps every configuration error; the wrapped errors
	// name the offending fields.
	ErrInvalidConfig = errors.New("berth: invalid config")

	// ErrQueueNotFound means the queue or table does not exist and the
	// transport is not allowed to create it.
	ErrQueueNotFound = errors.New("berth: queue does not exist")

	// ErrUnknownScheme is returned by OpenPublisher and OpenSubscriber for a
	// URL whose scheme no imported transport registered.
	ErrUnknownScheme = errors.New("berth: unknown URL scheme")

	// ErrMessageTooLarge is returned when a payload exceeds the
	// transport's limit.
	ErrMessageTooLarge = errors.New("berth: message too large")

	// ErrInvalidMessage is returned when a message cannot be stored as it
	// is (a UUID longer than the transport's column holds); the error says
	// which limit.
	ErrInvalidMessage = errors.New("berth: invalid message")
)

// Metadata keys the pipeline sets on every delivered message.
const (
	// MetadataAttempt holds the delivery attempt (1-based) as a decimal.
	MetadataAttempt = "berth_attempt"
	// MetadataMessageID holds the broker's id for the delivery.
	MetadataMessageID = "berth_message_id"
)

// A Kicker is a Waker whose source can also ask its own listener to claim
// again at once: the rows it announces only that source can take (the
// next message of an ordering key it just settled, which it claims by
// key), so no other instance competes for them and the receive loop
// answers without the jittered hold-off it uses against a herd of
// instances woken by one notification.
type Kicker interface {
	Waker
	// Kick returns a channel that receives a value when the source has
	// rows for its next claim. It is read by one listener only.
	Kick() <-chan struct{}
}
