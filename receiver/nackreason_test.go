package receiver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/berth-go/berth/receiver"
)

func TestSetNackReason(t *testing.T) {
	msg := newTrackedMessage(receiver.NewPending(nil))
	if got := receiver.NackReason(msg); got != "" {
		t.Fatalf("reason before SetNackReason = %q", got)
	}
	if !receiver.SetNackReason(msg, "first") || !receiver.SetNackReason(msg, "card declined") {
		t.Fatal("SetNackReason on a tracked message reported false")
	}
	if got := receiver.NackReason(msg); got != "card declined" {
		t.Fatalf("reason = %q, want the last one", got)
	}
	// Values added on top of the message context still find the tracker.
	type key struct{}
	msg.SetContext(context.WithValue(msg.Context(), key{}, 1))
	if got := receiver.NackReason(msg); got != "card declined" {
		t.Fatalf("reason through a derived context = %q", got)
	}

	plain := message.NewMessage("plain", nil)
	if receiver.SetNackReason(plain, "x") || receiver.NackReason(plain) != "" {
		t.Fatal("a message without a tracker recorded a reason")
	}
}

func TestNackReasonCleaned(t *testing.T) {
	for _, c := range []struct {
		name, in string
		check    func(string) bool
	}{
		{"short kept", "order 42: card declined", func(s string) bool { return s == "order 42: card declined" }},
		{"exactly the cap kept", strings.Repeat("a", receiver.MaxNackReason), func(s string) bool { return len(s) == receiver.MaxNackReason && !strings.HasSuffix(s, "…") }},
		{"long cut at a character", strings.Repeat("é", receiver.MaxNackReason), func(s string) bool {
			return len(s) <= receiver.MaxNackReason && len(s) > receiver.MaxNackReason-8 && strings.HasSuffix(s, "é…")
		}},
		{"invalid UTF-8 and NUL replaced", "bad \xff byte \x00 nul", func(s string) bool { return s == "bad \uFFFD byte \uFFFD nul" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			msg := newTrackedMessage(receiver.NewPending(nil))
			receiver.SetNackReason(msg, c.in)
			got := receiver.NackReason(msg)
			if !utf8.ValidString(got) || !c.check(got) {
				t.Fatalf("reason = %q (%d bytes)", got, len(got))
			}
		})
	}
}

func TestDeadLetterReasonMiddleware(t *testing.T) {
	produced := []*message.Message{message.NewMessage("out", nil)}
	var fail error
	h := receiver.DeadLetterReason()(func(*message.Message) ([]*message.Message, error) { return produced, fail })

	ok := newTrackedMessage(receiver.NewPending(nil))
	out, err := h(ok)
	if err != nil || len(out) != 1 || out[0] != produced[0] || receiver.NackReason(ok) != "" {
		t.Fatalf("success: out %v err %v reason %q", out, err, receiver.NackReason(ok))
	}

	fail = errors.New("order 42: card declined")
	failed := newTrackedMessage(receiver.NewPending(nil))
	if _, err := h(failed); !errors.Is(err, fail) {
		t.Fatalf("err = %v, want the handler's", err)
	}
	if got := receiver.NackReason(failed); got != fail.Error() {
		t.Fatalf("reason = %q, want %q", got, fail)
	}
	// A message from elsewhere passes through.
	if _, err := h(message.NewMessage("plain", nil)); !errors.Is(err, fail) {
		t.Fatalf("untracked: err = %v", err)
	}
}
