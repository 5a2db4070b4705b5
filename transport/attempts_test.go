package transport_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

func TestAttemptLine(t *testing.T) {
	at := time.Date(2026, 12, 6, 20, 31, 2, 125_000_000, time.FixedZone("CET", 3600))
	if got, want := transport.AttemptLine(2, at, "order 42:\r\ncard declined"), "attempt 2 at 2026-12-06T19:31:02.125Z: order 42: card declined\n"; got != want {
		t.Fatalf("line = %q, want %q", got, want)
	}
	if got, want := transport.AttemptLine(1, at, ""), "attempt 1 at 2026-12-06T19:31:02.125Z\n"; got != want {
		t.Fatalf("line without a reason = %q, want %q", got, want)
	}
	long := transport.AttemptLine(3, at, strings.Repeat("é", transport.MaxAttemptReason))
	reason := transport.AttemptErrors(message.Metadata{transport.MetadataAttemptErrors: long})[0].Reason
	if len(reason) > transport.MaxAttemptReason || !utf8.ValidString(reason) || !strings.HasSuffix(reason, "…") {
		t.Fatalf("a long reason is kept as %d bytes (valid %v): %q", len(reason), utf8.ValidString(reason), reason)
	}
}

func TestAppendAttemptLineKeepsNewestWholeLines(t *testing.T) {
	at := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	var h string
	for i := 1; i <= 40; i++ {
		h = transport.AppendAttemptLine(h, transport.AttemptLine(i, at, strings.Repeat("ü", 40)))
		if n := utf8.RuneCountInString(h); n > transport.MaxAttemptErrors {
			t.Fatalf("after %d lines the history holds %d characters", i, n)
		}
	}
	got := transport.AttemptErrors(message.Metadata{transport.MetadataAttemptErrors: h})
	if len(got) < 10 || got[len(got)-1].Attempt != 40 || strings.Count(h, "\n") != len(got) {
		t.Fatalf("history keeps %d readable lines of %d, the last attempt %d", len(got), strings.Count(h, "\n"), got[len(got)-1].Attempt)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Attempt != got[i-1].Attempt+1 || !got[i].At.Equal(at) || got[i].Reason != strings.Repeat("ü", 40) {
			t.Fatalf("line %d = %+v after %+v", i, got[i], got[i-1])
		}
	}
}

func TestAttemptErrorsSkipsWhatItCannotRead(t *testing.T) {
	md := message.Metadata{transport.MetadataAttemptErrors: "ut off line\nattempt x at 2026-12-06T00:00:00.000Z\nattempt 4 at yesterday: no\nattempt 5 at 2026-12-06T00:00:00.000Z: a: b\n"}
	got := transport.AttemptErrors(md)
	if len(got) != 1 || got[0].Attempt != 5 || got[0].Reason != "a: b" {
		t.Fatalf("attempt errors = %+v", got)
	}
	if got := transport.AttemptErrors(message.Metadata{}); got != nil {
		t.Fatalf("no history = %+v", got)
	}
}
