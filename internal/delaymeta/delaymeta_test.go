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
