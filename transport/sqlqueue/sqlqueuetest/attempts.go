package sqlqueuetest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// testAttemptErrorsKept checks that every retried attempt leaves its line
// in the row's transport.MetadataAttemptErrors header: the next delivery
// reads the earlier attempts' reasons, the history keeps its newest
// lines within transport.MaxAttemptErrors characters exactly as
// transport.AppendAttemptLine does, and a dead letter keeps it. A row
// whose metadata holds a NUL (which PostgreSQL's jsonb refuses) is retried
// in the same batch without failing it.
func testAttemptErrorsKept(t *testing.T, h Harness) {
	ctx := context.Background()
	f := h.open(t)
	db := f.pool(t, 3)
	pub := f.newPub(t, db)
	const topic = "attempt_errors"
	plain := message.NewMessage(watermill.NewUUID(), []byte("plain"))
	plain.Metadata.Set("k", "v")
	nul := message.NewMessage(watermill.NewUUID(), []byte("nul"))
	nul.Metadata.Set("k", "a\x00b")
	if err := pub.Publish(topic, plain, nul); err != nil {
		t.Fatal(err)
	}
	src := f.newSource(t, db, topic)

	// claim takes both rows, due at once, and starts them.
	claim := func(want int) map[string]*transport.Delivery {
		t.Helper()
		got := map[string]*transport.Delivery{}
		waitFor(t, 10*time.Second, "retried rows to be claimable", func() bool {
			ds, err := src.Claim(ctx, want-len(got))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				if err := src.Begin(ctx, d); err != nil {
					t.Fatal(err)
				}
				m, err := src.Map(d)
				if err != nil {
					t.Fatal(err)
				}
				got[string(m.Payload)] = d
			}
			return len(got) == want
		})
		return got
	}
	meta := func(d *transport.Delivery) message.Metadata {
		t.Helper()
		// What the row holds, as the next Map and a dead letter see it.
		var headers string
		if err := db.QueryRow(`SELECT headers FROM `+src.Queue().Table+` WHERE id = `+f.ph(1), rowID(t, d.ID)).Scan(&headers); err != nil {
			t.Fatal(err)
		}
		var md message.Metadata
		if err := json.Unmarshal([]byte(headers), &md); err != nil {
			t.Fatalf("headers %q: %v", headers, err)
		}
		return md
	}

	// The first retry: both rows in flight at once, so that their
	// retries can share a statement.
	ds := claim(2)
	errs := make(chan error, 2)
	go func() { errs <- src.Retry(ctx, ds["plain"], 0, "boom 1\nsecond line") }()
	go func() { errs <- src.Retry(ctx, ds["nul"], 0, "nul 1") }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("retry: %v", err)
		}
	}
	ds = claim(2)
	if md := meta(ds["nul"]); md.Get("k") != "a\x00b" {
		t.Fatalf("the NUL row's metadata after a retry = %q", md)
	}
	got := transport.AttemptErrors(meta(ds["plain"]))
	if len(got) != 1 || got[0].Attempt != 1 || got[0].Reason != "boom 1 second line" ||
		time.Since(got[0].At) > time.Minute || time.Since(got[0].At) < -time.Minute {
		t.Fatalf("attempt errors after one retry = %+v", got)
	}
	if err := src.Complete(ctx, ds["nul"]); err != nil {
		t.Fatal(err)
	}

	// Long reasons until the history overflows: the database keeps what
	// AppendAttemptLine keeps (lines of one length, so the same ones).
	long := strings.Repeat("xé", transport.MaxAttemptReason) // cut to fit
	want := transport.AttemptLine(1, time.Now(), "boom 1 second line")
	d := ds["plain"]
	const last = 12
	for attempt := 2; attempt <= last; attempt++ {
		if d.Attempt != attempt {
			t.Fatalf("delivery attempt = %d, want %d", d.Attempt, attempt)
		}
		if err := src.Retry(ctx, d, 0, long); err != nil {
			t.Fatal(err)
		}
		want = transport.AppendAttemptLine(want, transport.AttemptLine(attempt, time.Now(), long))
		d = claim(1)["plain"]
	}
	md := meta(d)
	got = transport.AttemptErrors(md)
	wantErrs := transport.AttemptErrors(message.Metadata{transport.MetadataAttemptErrors: want})
	if len(got) != len(wantErrs) || len(got) < 2 || got[len(got)-1].Attempt != last {
		t.Fatalf("history holds attempts %v, want %v", attemptsOf(got), attemptsOf(wantErrs))
	}
	for i := range got {
		if got[i].Attempt != wantErrs[i].Attempt || got[i].Reason != wantErrs[i].Reason {
			t.Fatalf("history line %d = %+v, want %+v", i, got[i], wantErrs[i])
		}
	}
	if n := len([]rune(md.Get(transport.MetadataAttemptErrors))); n > transport.MaxAttemptErrors {
		t.Fatalf("history holds %d characters, more than %d", n, transport.MaxAttemptErrors)
	}
	if md.Get("k") != "v" {
		t.Fatalf("the row's own metadata after retries = %q", md)
	}

	// The dead letter keeps the history beside its final reason.
	if err := src.DeadLetter(ctx, d, nil, "final"); err != nil {
		t.Fatal(err)
	}
	var headers, reason string
	if err := db.QueryRow(`SELECT headers, reason FROM `+f.errors+` WHERE message_uuid = `+f.ph(1), plain.UUID).Scan(&headers, &reason); err != nil {
		t.Fatal(err)
	}
	var dead message.Metadata
	if err := json.Unmarshal([]byte(headers), &dead); err != nil {
		t.Fatal(err)
	}
	if reason != "final" || !slices.Equal(attemptsOf(transport.AttemptErrors(dead)), attemptsOf(got)) {
		t.Fatalf("dead letter: reason %q, attempts %v; want final, %v", reason, attemptsOf(transport.AttemptErrors(dead)), attemptsOf(got))
	}
}

func attemptsOf(es []transport.AttemptError) []int {
	out := make([]int, len(es))
	for i, e := range es {
		out[i] = e.Attempt
	}
	return out
}
