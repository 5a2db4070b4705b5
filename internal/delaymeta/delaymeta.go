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
//  5. A due time in the past is no delay; a negative Watermill for is no
//     delay (delay.Until with a past time), a negative Delay key is an
//     error.
package delaymeta

import (
	"fmt"
	"strconv"
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

// watermill reads Watermill's keys (rules 3 and 4).
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
