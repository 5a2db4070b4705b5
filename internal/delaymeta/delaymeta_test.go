package delaymeta_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/delaymeta"
	"github.com/berth-go/berth/transport"
)

var sqlKeys = delaymeta.Keys{Delay: "berth_delay", DeliverAt: "berth_deliver_at"}

func TestDelay(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 700_000_000, time.UTC) // .7s: until truncates
	rfc := func(t time.Time) string { return t.Format(time.RFC3339) }
	for _, tc := range []struct {
		name string
		md   map[string]string
		keys delaymeta.Keys
		want time.Duration
	}{
		{"none", map[string]string{"other": "x"}, sqlKeys, 0},
		{"berth delay", map[string]string{"berth_delay": "1500ms"}, sqlKeys, 1500 * time.Millisecond},
		{"berth deliver at", map[string]string{"berth_deliver_at": now.Add(3 * time.Second).Format(time.RFC3339Nano)}, sqlKeys, 3 * time.Second},
		{"berth delay wins over deliver at", map[string]string{"berth_delay": "1s", "berth_deliver_at": rfc(now.Add(time.Hour))}, sqlKeys, time.Second},
		{"berth key wins over watermill's", map[string]string{"berth_delay": "1s", delaymeta.WatermillFor: "1h", delaymeta.WatermillUntil: rfc(now.Add(time.Hour))}, sqlKeys, time.Second},
		{"seconds", map[string]string{"d": "30"}, delaymeta.Keys{Delay: "d", DelaySeconds: true}, 30 * time.Second},
		{"for with matching until: sub-second", map[string]string{delaymeta.WatermillFor: "1.5s", delaymeta.WatermillUntil: rfc(now.Add(1500 * time.Millisecond))}, sqlKeys, 1500 * time.Millisecond},
		{"for alone", map[string]string{delaymeta.WatermillFor: "250ms"}, sqlKeys, 250 * time.Millisecond},
		{"until alone", map[string]string{delaymeta.WatermillUntil: rfc(now.Add(10 * time.Second))}, sqlKeys, 9300 * time.Millisecond},
		{"republished later: until honoured", map[string]string{delaymeta.WatermillFor: "10s", delaymeta.WatermillUntil: rfc(now.Add(4 * time.Second))}, sqlKeys, 3300 * time.Millisecond},
		{"until later than now+for: until", map[string]string{delaymeta.WatermillFor: "1s", delaymeta.WatermillUntil: rfc(now.Add(5 * time.Second))}, sqlKeys, 4300 * time.Millisecond},
		{"past until: no delay", map[string]string{delaymeta.WatermillFor: "2s", delaymeta.WatermillUntil: rfc(now.Add(-time.Minute))}, sqlKeys, 0},
		{"negative for: no delay", map[string]string{delaymeta.WatermillFor: "-3s"}, sqlKeys, 0},
		{"past deliver at: no delay", map[string]string{"berth_deliver_at": rfc(now.Add(-time.Hour))}, sqlKeys, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, set, err := delaymeta.Delay(tc.md, now, tc.keys)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || set != (tc.name != "none") {
				t.Errorf("Delay = %s, %t; want %s, %t", got, set, tc.want, tc.name != "none")
			}
		})
	}
}

// TestDelayWatermillMessage reads what delay.Message and delay.NewPublisher
// write.
func TestDelayWatermillMessage(t *testing.T) {
	for _, d := range []time.Duration{1500 * time.Millisecond, 2 * time.Second, 100 * time.Millisecond, 15 * time.Minute} {
		m := message.NewMessage("1", nil)
		delay.Message(m, delay.For(d))
		got, _, err := delaymeta.Delay(m.Metadata, time.Now(), delaymeta.Keys{})
		if err != nil {
			t.Fatal(err)
		}
		if got < d || got > d+50*time.Millisecond {
			t.Errorf("delay.For(%s): Delay = %s", d, got)
		}
	}
}

func TestDelayMalformed(t *testing.T) {
	for _, tc := range []struct {
		md  map[string]string
		key string
	}{
		{map[string]string{"berth_delay": "soon"}, "berth_delay"},
		{map[string]string{"berth_delay": "-1s"}, "berth_delay"},
		{map[string]string{"berth_deliver_at": "tomorrow"}, "berth_deliver_at"},
		{map[string]string{delaymeta.WatermillUntil: "2025-13-01"}, delaymeta.WatermillUntil},
		{map[string]string{delaymeta.WatermillFor: "2 seconds"}, delaymeta.WatermillFor},
		// Checked even when a Berth key wins.
		{map[string]string{"berth_delay": "1s", delaymeta.WatermillFor: "x"}, delaymeta.WatermillFor},
	} {
		_, _, err := delaymeta.Delay(tc.md, time.Now(), sqlKeys)
		if !errors.Is(err, transport.ErrInvalidMessage) {
			t.Errorf("%v: err = %v, want ErrInvalidMessage", tc.md, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.key+"=") || !strings.Contains(err.Error(), tc.md[tc.key]) {
			t.Errorf("%v: %v does not name %s and its value", tc.md, err, tc.key)
		}
	}
}

// TestDelayPublishedAgain follows a message with a Watermill delay under
// Window through two publishes, as a requeuer makes them: the first
// stores Mark's marker with the message, and the second, right after the
// delay passed, finds the message due (rule 5). Without the marker the
// second publish reads the pair as just set and delays it again.
func TestDelayPublishedAgain(t *testing.T) {
	first := time.Date(2025, 3, 1, 12, 0, 0, 300_000_000, time.UTC)
	pair := func(d time.Duration) message.Metadata {
		// What delay.Message(m, delay.For(d)) writes at first.
		return message.Metadata{delaymeta.WatermillUntil: first.Add(d).Format(time.RFC3339), delaymeta.WatermillFor: d.String()}
	}
	for _, d := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second} {
		m := message.NewMessage("1", nil)
		m.Metadata = pair(d)
		got, _, err := delaymeta.Delay(m.Metadata, first, sqlKeys)
		if err != nil || got != d {
			t.Fatalf("delay.For(%s), first publish: Delay = %s, %v", d, got, err)
		}
		again := first.Add(d + 10*time.Millisecond)
		if unmarked, _, _ := delaymeta.Delay(m.Metadata, again, sqlKeys); unmarked != d {
			t.Fatalf("delay.For(%s) published again without the marker: Delay = %s, want %s (rule 3)", d, unmarked, d)
		}
		mark := delaymeta.Mark(m.Metadata, first, got, sqlKeys)
		if mark == "" {
			t.Fatalf("delay.For(%s): no marker", d)
		}
		m.Metadata.Set(delaymeta.Marker, mark)
		if got, _, _ := delaymeta.Delay(m.Metadata, again, sqlKeys); got != 0 {
			t.Errorf("delay.For(%s) published again %s after the first publish: Delay = %s, want 0", d, again.Sub(first), got)
		}
		early := first.Add(d / 2)
		if got, _, _ := delaymeta.Delay(m.Metadata, early, sqlKeys); got != d-d/2 {
			t.Errorf("delay.For(%s) published again halfway: Delay = %s, want %s", d, got, d-d/2)
		}
		// middleware.DelayOnError sets a new pair on the next failure:
		// the marker of the old one no longer applies.
		for k, v := range pair(2 * d) {
			m.Metadata.Set(k, v)
		}
		if got, _, _ := delaymeta.Delay(m.Metadata, again, sqlKeys); got != 2*d {
			t.Errorf("delay.For(%s) after a marker of delay.For(%s): Delay = %s, want %s", 2*d, d, got, 2*d)
		}
	}
}

func TestMark(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 700_000_000, time.UTC)
	until, forD := now.Add(time.Second).Format(time.RFC3339), "500ms"
	for _, tc := range []struct {
		name string
		md   map[string]string
		want string
	}{
		{"both keys", map[string]string{delaymeta.WatermillUntil: until, delaymeta.WatermillFor: forD}, "2025-03-01T12:00:01.2Z|" + until + "|500ms"},
		{"for alone", map[string]string{delaymeta.WatermillFor: forD}, ""},
		{"until alone", map[string]string{delaymeta.WatermillUntil: until}, ""},
		{"own key decides", map[string]string{"berth_delay": "1s", delaymeta.WatermillUntil: until, delaymeta.WatermillFor: forD}, ""},
		{"none", map[string]string{}, ""},
	} {
		if got := delaymeta.Mark(tc.md, now, 500*time.Millisecond, sqlKeys); got != tc.want {
			t.Errorf("%s: Mark = %q, want %q", tc.name, got, tc.want)
		}
	}
	// A marker of another pair, or a malformed one, is not read.
	md := map[string]string{delaymeta.WatermillUntil: until, delaymeta.WatermillFor: forD}
	for _, v := range []string{
		"2025-03-01T12:00:01.2Z|" + until + "|1s",
		"2025-03-01T12:00:01.2Z",
		"soon|" + until + "|500ms",
	} {
		md[delaymeta.Marker] = v
		if got, _, err := delaymeta.Delay(md, now, sqlKeys); err != nil || got != 500*time.Millisecond {
			t.Errorf("marker %q: Delay = %s, %v; want 500ms (rule 3)", v, got, err)
		}
	}
}
