package sqlqueuetest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// badRows are the rows every dialect's queue table can hold: headers that
// are not a JSON object of strings (dead-lettered), and odd but valid rows
// (handled).
func badRows() []BadRow {
	dead := func(uuid, headers string) BadRow {
		return BadRow{RawRow: RawRow{UUID: uuid, Headers: headers, Body: []byte("x")}, Dead: true}
	}
	handled := func(uuid, headers string, body []byte) BadRow {
		return BadRow{RawRow: RawRow{UUID: uuid, Headers: headers, Body: body}, Payload: body}
	}
	return []BadRow{
		dead("not-json", "not json"),
		dead("wrong-type", `{"a":1}`),
		dead("bool-value", `{"a":true}`),
		dead("array", `[1,2]`),
		dead("nested", `{"a":{"b":"c"}}`),
		dead("truncated", `{"a":"b`),
		dead("number", `42`),
		handled("empty-headers", "", []byte("e")),
		handled("null-headers", "null", []byte("n")),
		handled("plain-sql", "{}", []byte("hello from plain SQL")),
		handled("binary-body", "{}", []byte{0xff, 0, 0xfe}),
		handled("empty-body", "{}", []byte{}),
		handled("lone-surrogate", `{"k":"\ud800"}`, []byte("s")),
		handled("dup-key", `{"a":"1","a":"2"}`, []byte("d")),
		handled("big-body", "{}", bytes.Repeat([]byte("b"), 3<<20)),
		handled("", "{}", []byte("no uuid")),
	}
}

// testBadInput inserts malformed rows by hand and checks that each is
// either handled or dead-lettered with a reason, and that the loop keeps
// running: a valid message published after them is delivered.
func testBadInput(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 4)
	const topic = "bad_input"
	sub := f.newSubscriber(t, f.subConfig(db))
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	q := sub.Queue(topic)
	rows := append(badRows(), h.BadRows...)
	for _, r := range rows {
		f.insert(t, db, q, r.RawRow)
	}

	var mu sync.Mutex
	got := map[string][]byte{}
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for msg := range ch {
			mu.Lock()
			got[msg.UUID] = msg.Payload
			mu.Unlock()
			msg.Ack()
		}
	}()

	// Published through Berth after the bad rows, with metadata that is not
	// valid UTF-8 (encoded as JSON, it comes back with U+FFFD).
	pub := f.newPub(t, db)
	after := message.NewMessage("valid-after", []byte("ok"))
	after.Metadata.Set("bad\xffkey", "bad\xfevalue")
	if err := pub.Publish(topic, after); err != nil {
		t.Fatal(err)
	}
	// Oversize through Berth is refused at the publisher, naming the limit.
	big := message.NewMessage("too-big", bytes.Repeat([]byte("x"), sqlqueue.DefaultMaxMessageSize+1))
	if err := pub.Publish(topic, big); !errors.Is(err, transport.ErrMessageTooLarge) {
		t.Fatalf("oversize publish: err = %v, want ErrMessageTooLarge", err)
	}

	waitFor(t, 30*time.Second, "the valid message after the bad ones", func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := got["valid-after"]
		return ok
	})
	waitFor(t, 30*time.Second, "an empty queue table", func() bool {
		var n int
		_ = db.QueryRow(`SELECT count(*) FROM ` + q.Table).Scan(&n)
		return n == 0
	})
	f.checkBadRows(t, db, q, rows, func(uuid string) ([]byte, bool) {
		mu.Lock()
		defer mu.Unlock()
		p, ok := got[uuid]
		return p, ok
	})
}

// checkBadRows checks each row's fate against the error table and what
// handled reports.
func (f *fixture) checkBadRows(t *testing.T, db *sql.DB, q sqlqueue.Queue, rows []BadRow, handled func(string) ([]byte, bool)) {
	t.Helper()
	reasons := map[string]string{}
	rs, err := db.Query(`SELECT message_uuid, reason FROM `+q.Errors+` WHERE queue_table = `+f.ph(1), q.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var u, r string
		if err := rs.Scan(&u, &r); err != nil {
			t.Fatal(err)
		}
		reasons[u] = r
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		p, ok := handled(r.UUID)
		reason, dead := reasons[r.UUID]
		switch {
		case r.Dead && !dead:
			t.Errorf("%q: not dead-lettered (handled: %v)", r.UUID, ok)
		case r.Dead && strings.TrimSpace(reason) == "":
			t.Errorf("%q: dead-lettered without a reason", r.UUID)
		case r.Dead && ok:
			t.Errorf("%q: dead-lettered and handled", r.UUID)
		case !r.Dead && !ok:
			t.Errorf("%q: not handled (dead-lettered: %q)", r.UUID, reason)
		case !r.Dead && r.Payload != nil && !bytes.Equal(p, r.Payload):
			t.Errorf("%q: payload %.20q…, want %.20q…", r.UUID, p, r.Payload)
		}
		if dead {
			t.Logf("%q dead-lettered: %s", r.UUID, reason)
		}
	}
}
