// Package delaymeta reads a message's delivery delay from its metadata, the
// same way on every transport: a transport's own keys (sqlqueue's
// berth_delay and berth_deliver_at, mem's berth_delay, sqs's
// berth_sqs_delay) and the two keys Watermill's components/delay sets,
// [WatermillUntil] and [WatermillFor].
//
// # Rules
//
//  1. Every delay key present is checked; a malformed value is an error
//     wrapping transport.ErrInvalidMessage that names the key and the value.
//  2. A transport's own keys win over Watermill's: Delay first, then
//     DeliverAt.
//  3. Watermill's until is RFC 3339 truncated to seconds (delay.Message
//     formats it with time.RFC3339), so when for is present too and
//     now+for lies in [until, until+Window), the message is due at
//     now+for: delay.For(1500ms) is due 1.5s after Publish, not 1s or 2s.
//  4. Otherwise until is honoured: a message published again later (from
//     an outbox, by a forwarder) is due when it was first meant to be, and
//     one whose until is later than now+for is never due early.
//  5. A message published again carrying [Marker] with the same until and
//     for is due at the time stored there: a transport stores it with the
//     message (see [Mark]) when it reads both keys, so a requeuer or
//     forwarder that publishes the message again right after a delay
//     under Window passed does not meet rule 3 a second time and wait
//     the delay out twice. A marker for another pair (middleware.DelayOnError
//     sets a new one on each failure) or a malformed one is ignored.
//  6. A due time in the past is no delay; a negative Watermill for is no
//     delay (delay.Until with a past time), a negative Delay key is an
//     error.
package delaymeta

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"

	"github.com/berth-go/berth/transport"
)

// Watermill's metadata keys (components/delay).
const (
	// WatermillUntil is the due time, RFC 3339 with second precision.
	WatermillUntil = delay.DelayedUntilKey
	// WatermillFor is the delay, a Go duration ("1.5s").
	WatermillFor = delay.DelayedForKey
)

// Marker is the metadata key under which a transport stores, with a
// message published with both of Watermill's keys, the due time it read
// from them and the pair it read it from (rule 5), as
// "<due, RFC 3339 with nanoseconds>|<until>|<for>".
const Marker = "berth_watermill_due"

// Window is how far past WatermillUntil now+WatermillFor may lie and still
// be taken as the same due time (rule 3): until's truncation (under 1s)
// plus 500ms between delay.For and Publish.
const Window = 1500 * time.Millisecond

// Keys names a transport's own delay keys; "" means the transport has none.
type Keys struct {
	// Delay is a key holding a Go duration ("1500ms"), ≥ 0.
	Delay string
	// DelaySeconds makes Delay accept whole seconds ("30") too.
	DelaySeconds bool
	// DeliverAt is a key holding an RFC 3339 time.
	DeliverAt string
}

// Delay returns how long after now the message with metadata md is due (0:
// at once), and whether md sets a delay at all (a transport's default delay
// applies only when it does not). See the package documentation for the
// rules.
func Delay(md map[string]string, now time.Time, k Keys) (d time.Duration, set bool, err error) {
	own, ownSet, err := k.own(md, now)
	if err != nil {
		return 0, false, err
	}
	wm, wmSet, err := watermill(md, now)
	if err != nil {
		return 0, false, err
	}
	switch {
	case ownSet:
		return max(own, 0), true, nil
	case wmSet:
		return max(wm, 0), true, nil
	}
	return 0, false, nil
}

// Mark returns the value of [Marker] for a message with metadata md
// published at now and due d after it (what Delay returned, after any
// rounding the transport applies), or "" when none is needed: Watermill's
// until and for are not both set, or a transport's own key decided.
func Mark(md map[string]string, now time.Time, d time.Duration, k Keys) string {
	until, forD := md[WatermillUntil], md[WatermillFor]
	if until == "" || forD == "" || get(md, k.Delay) != "" || get(md, k.DeliverAt) != "" {
		return ""
	}
	return now.Add(max(d, 0)).UTC().Format(time.RFC3339Nano) + "|" + until + "|" + forD
}

// marked returns the due time md's Marker stores for its until and for
// (rule 5), and whether it holds one.
func marked(md map[string]string) (time.Time, bool) {
	due, pair, ok := strings.Cut(md[Marker], "|")
	if !ok || pair != md[WatermillUntil]+"|"+md[WatermillFor] {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, due)
	return t, err == nil
}

// own reads the transport's keys: Delay wins over DeliverAt.
func (k Keys) own(md map[string]string, now time.Time) (time.Duration, bool, error) {
	var (
		d, at     time.Duration
		dSet, atS bool
	)
	if v := get(md, k.Delay); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil && k.DelaySeconds {
			var n int
			if n, err = strconv.Atoi(v); err == nil {
				d = time.Duration(n) * time.Second
			}
		}
		if err != nil || d < 0 {
			want := "a non-negative Go duration (1500ms)"
			if k.DelaySeconds {
				want = "a non-negative Go duration (30s) or whole seconds (30)"
			}
			return 0, false, invalid(k.Delay, v, want)
		}
		dSet = true
	}
	if v := get(md, k.DeliverAt); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return 0, false, invalid(k.DeliverAt, v, "an RFC 3339 time")
		}
		at, atS = t.Sub(now), true
	}
	if dSet {
		return d, true, nil
	}
	return at, atS, nil
}

// watermill reads Watermill's keys (rules 3 to 5).
func watermill(md map[string]string, now time.Time) (time.Duration, bool, error) {
	var (
		until      time.Time
		forD       time.Duration
		uSet, fSet bool
	)
	if v := md[WatermillUntil]; v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return 0, false, invalid(WatermillUntil, v, "an RFC 3339 time")
		}
		until, uSet = t, true
	}
	if v := md[WatermillFor]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, false, invalid(WatermillFor, v, "a Go duration")
		}
		forD, fSet = d, true
	}
	switch {
	case uSet && fSet:
		if at, ok := marked(md); ok {
			return at.Sub(now), true, nil
		}
		if at := now.Add(forD); !at.Before(until) && at.Sub(until) < Window {
			return forD, true, nil
		}
		return until.Sub(now), true, nil
	case uSet:
		return until.Sub(now), true, nil
	case fSet:
		return forD, true, nil
	}
	return 0, false, nil
}

func get(md map[string]string, key string) string {
	if key == "" {
		return ""
	}
	return md[key]
}

func invalid(key, value, want string) error {
	return fmt.Errorf("%w: metadata %s=%q is not %s", transport.ErrInvalidMessage, key, value, want)
}
