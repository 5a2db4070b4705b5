package receiver

import (
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/textcut"
)

// MaxNackReason is the longest nack reason SetNackReason keeps, in bytes
// (1 KiB): a longer one is cut at a character boundary and ends with "…",
// so a handler's error with a stack trace or a response body in it cannot
// bloat a dead-letter row or overflow an SQS message attribute.
const MaxNackReason = 1024

// SetNackReason records why msg is about to be nacked. When that nack
// dead-letters msg (it was the last attempt), the pipeline's reason, such
// as "nacked on attempt 3 of 3 (MaxAttempts)", is followed by ": " and
// reason, and that is what the dead-letter destination stores (the SQL
// error row's reason, the reason in SQS's berth_dead_letter attribute,
// mem's DeadLetter.Reason) and what Observer.DeadLettered receives. A nack
// that is retried drops the reason with the delivery.
//
// Call it before Nack; the last call wins. The reason is made valid UTF-8
// without NUL bytes and cut to MaxNackReason. SetNackReason reports false,
// recording nothing, for a message that did not come from a Berth
// subscriber (its context carries no Tracker). It is safe for concurrent
// use. A Watermill router does it for every handler error with
// DeadLetterReason.
func SetNackReason(msg *message.Message, reason string) bool {
	t := TrackerFrom(msg.Context())
	if t == nil {
		return false
	}
	reason = cleanReason(reason)
	t.nackReason.Store(&reason)
	return true
}

// NackReason returns the reason recorded for msg with SetNackReason, or "".
func NackReason(msg *message.Message) string {
	if t := TrackerFrom(msg.Context()); t != nil {
		return t.NackReason()
	}
	return ""
}

// NackReason returns the reason recorded with SetNackReason for the
// tracker's message, or "". Receivers read it when a nack dead-letters the
// message.
func (t *Tracker) NackReason() string {
	if r := t.nackReason.Load(); r != nil {
		return *r
	}
	return ""
}

// DeadLetterReason returns a Watermill router middleware that records the
// handler's error, when it returns one, as its message's nack reason (see
// SetNackReason) before the router nacks the message. A poison message then
// reaches the dead letters with the error that sank it:
//
//	nacked on attempt 3 of 3 (MaxAttempts): order 42: card declined
//
// instead of the attempt count alone. Add it to the router (or a handler)
// before middleware that turns panics into errors, such as
// middleware.Recoverer, to record panics too:
//
//	router.AddMiddleware(receiver.DeadLetterReason(), middleware.Recoverer)
//
// Messages that did not come from a Berth subscriber pass through
// untouched.
func DeadLetterReason() message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			produced, err := h(msg)
			if err != nil {
				SetNackReason(msg, err.Error())
			}
			return produced, err
		}
	}
}

// cleanReason returns reason as valid UTF-8 without NUL bytes (which
// PostgreSQL's text refuses), at most MaxNackReason bytes long.
func cleanReason(reason string) string {
	reason = strings.ToValidUTF8(reason, "\uFFFD")
	reason = strings.ReplaceAll(reason, "\x00", "\uFFFD")
	return textcut.Cut(reason, MaxNackReason)
}
