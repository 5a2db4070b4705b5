package transport

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/textcut"
)

// MetadataAttemptErrors holds a message's history of nacked attempts, on a
// transport that keeps one (the SQL queues and mem; SQS cannot change a
// message it redelivers): one line per nacked attempt, oldest first, each
//
//	attempt 2 at 2026-12-06T20:31:02.125Z: order 42: card declined
//
// ending in a newline; the reason is what the handler recorded with
// receiver.SetNackReason (a Watermill router's handler error, with
// receiver.DeadLetterReason), cut to MaxAttemptReason bytes, and is absent
// when none was recorded. The value keeps the newest lines that fit in
// MaxAttemptErrors characters. A handler sees the lines of the attempts
// before its own; a dead letter keeps them beside its final reason, and
// a replay carries them on. Read them with AttemptErrors.
const MetadataAttemptErrors = "berth_attempt_errors"

// MaxAttemptErrors is the most characters MetadataAttemptErrors holds:
// older lines drop out whole.
const MaxAttemptErrors = 2000

// MaxAttemptReason is the longest reason an attempt's line keeps, in
// bytes; a longer one is cut at a character boundary and ends with "…".
const MaxAttemptReason = 300

// An AttemptError is one nacked attempt from MetadataAttemptErrors.
type AttemptError struct {
	Attempt int       // the attempt's number, 1-based
	At      time.Time // when it was nacked (UTC, millisecond precision)
	Reason  string    // why, or "" when the handler recorded no reason
}

// AttemptLine returns the line MetadataAttemptErrors holds for attempt,
// nacked at at with reason (line breaks in it become spaces).
func AttemptLine(attempt int, at time.Time, reason string) string {
	var b strings.Builder
	b.WriteString("attempt ")
	b.WriteString(strconv.Itoa(attempt))
	b.WriteString(" at ")
	b.WriteString(at.UTC().Format(attemptTime))
	if reason != "" {
		b.WriteString(": ")
		b.WriteString(textcut.Cut(oneLine.Replace(reason), MaxAttemptReason))
	}
	b.WriteByte('\n')
	return b.String()
}

// AppendAttemptLine returns history (a MetadataAttemptErrors value) with
// line appended, its oldest lines dropped until it fits in
// MaxAttemptErrors characters. The SQL dialects do the same in SQL.
func AppendAttemptLine(history, line string) string {
	v := history + line
	if utf8.RuneCountInString(v) <= MaxAttemptErrors {
		return v
	}
	// Keep the last MaxAttemptErrors characters, then drop the cut line.
	cut := len(v)
	for n := 0; n < MaxAttemptErrors; n++ {
		_, size := utf8.DecodeLastRuneInString(v[:cut])
		cut -= size
	}
	v = v[cut:]
	if i := strings.IndexByte(v, '\n'); i >= 0 {
		return v[i+1:]
	}
	return ""
}

// AttemptErrors returns the nacked attempts md's MetadataAttemptErrors
// holds, oldest first; lines it cannot read are skipped.
func AttemptErrors(md message.Metadata) []AttemptError {
	var out []AttemptError
	for line := range strings.Lines(md.Get(MetadataAttemptErrors)) {
		line = strings.TrimSuffix(line, "\n")
		rest, ok := strings.CutPrefix(line, "attempt ")
		if !ok {
			continue
		}
		num, rest, ok := strings.Cut(rest, " at ")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil {
			continue
		}
		stamp, reason, _ := strings.Cut(rest, ": ")
		at, err := time.Parse(attemptTime, stamp)
		if err != nil {
			continue
		}
		out = append(out, AttemptError{Attempt: n, At: at, Reason: reason})
	}
	return out
}

// attemptTime is the layout of an attempt's time: fixed width, so that
// lines line up.
const attemptTime = "2006-01-02T15:04:05.000Z07:00"

// oneLine turns a reason's line breaks into spaces.
var oneLine = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ")
