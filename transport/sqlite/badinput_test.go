package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// badRow is a row inserted by hand, as another tool (or a bug, or a disk)
// might leave it, and what the subscriber must do with it.
type badRow struct {
	uuid    string
	headers any // bound as is: string, []byte, int
	body    any
	dead    bool   // dead-lettered with a reason; else handled
	payload []byte // when handled (nil: don't check)
}

func badRows() []badRow {
	return []badRow{
		{uuid: "not-json", headers: "not json", body: []byte("x"), dead: true},
		{uuid: "wrong-type", headers: `{"a":1}`, body: []byte("x"), dead: true},
		{uuid: "array", headers: `[1,2]`, body: []byte("x"), dead: true},
		{uuid: "nested", headers: `{"a":{"b":"c"}}`, body: []byte("x"), dead: true},
		{uuid: "truncated", headers: `{"a":"b`, body: []byte("x"), dead: true},
		{uuid: "blob-headers", headers: []byte{0xff, 0xfe, '{'}, body: []byte("x"), dead: true},
		{uuid: "int-headers", headers: 42, body: []byte("x"), dead: true},
		{uuid: "empty-headers", headers: "", body: []byte("e"), payload: []byte("e")},
		{uuid: "null-headers", headers: "null", body: []byte("n"), payload: []byte("n")},
		{uuid: "plain-sql", headers: "{}", body: []byte("hello from sqlite3"), payload: []byte("hello from sqlite3")},
		{uuid: "binary-body", headers: "{}", body: []byte{0xff, 0, 0xfe}, payload: []byte{0xff, 0, 0xfe}},
		{uuid: "text-body", headers: "{}", body: "abc", payload: []byte("abc")},
		{uuid: "lone-surrogate", headers: `{"k":"\ud800"}`, body: []byte("s"), payload: []byte("s")},
		{uuid: "dup-key", headers: `{"a":"1","a":"2"}`, body: []byte("d"), payload: []byte("d")},
		{uuid: "big-body", headers: "{}", body: bytes.Repeat([]byte("b"), 3<<20), payload: bytes.Repeat([]byte("b"), 3<<20)},
		{uuid: "", headers: "{}", body: []byte("no uuid"), payload: []byte("no uuid")},
	}
}

// TestBadInput inserts malformed rows by hand and checks that each is either
// handled or dead-lettered with a reason, and that the loop keeps running: a
// valid message published after them is delivered.
func TestBadInput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.db")
	topic := "bad_input"
	ctx := context.Background()

	sub, err := sqlite.NewSubscriber(subConfig(path, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	q := sub.Queue(topic)
	db, closer, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rows := badRows()
	for _, r := range rows {
		if _, err := db.Exec(`INSERT INTO `+q.Table+` (uuid, headers, body, created_at, due_at) VALUES (?, ?, ?, 0, 0)`, r.uuid, r.headers, r.body); err != nil {
			t.Fatalf("insert %q: %v", r.uuid, err)
		}
	}

	var mu sync.Mutex
	got := map[string][]byte{}
	ch, err := sub.Subscribe(ctx, topic)
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
	pub, err := sqlite.NewPublisher(sqlite.PublisherConfig{Path: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
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

	waitUntil(t, 30*time.Second, "the valid message after the bad ones", func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := got["valid-after"]
		return ok
	})
	waitUntil(t, 30*time.Second, "an empty queue table", func() bool {
		var n int
		_ = db.QueryRow(`SELECT count(*) FROM ` + q.Table).Scan(&n)
		return n == 0
	})
	checkBadRows(t, db, q, rows, func(uuid string) ([]byte, bool) {
		mu.Lock()
		defer mu.Unlock()
		p, ok := got[uuid]
		return p, ok
	})
}

func checkBadRows(t *testing.T, db *sql.DB, q sqlqueue.Queue, rows []badRow, handled func(string) ([]byte, bool)) {
	t.Helper()
	reasons := map[string]string{}
	rs, err := db.Query(`SELECT message_uuid, reason FROM `+q.Errors+` WHERE queue_table = ?`, q.Name)
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
	for _, r := range rows {
		p, ok := handled(r.uuid)
		reason, dead := reasons[r.uuid]
		switch {
		case r.dead && !dead:
			t.Errorf("%q: not dead-lettered (handled: %v)", r.uuid, ok)
		case r.dead && strings.TrimSpace(reason) == "":
			t.Errorf("%q: dead-lettered without a reason", r.uuid)
		case r.dead && ok:
			t.Errorf("%q: dead-lettered and handled", r.uuid)
		case !r.dead && !ok:
			t.Errorf("%q: not handled (dead-lettered: %q)", r.uuid, reason)
		case !r.dead && r.payload != nil && !bytes.Equal(p, r.payload):
			t.Errorf("%q: payload %.20q…, want %.20q…", r.uuid, p, r.payload)
		}
		if dead {
			t.Logf("%q dead-lettered: %s", r.uuid, reason)
		}
	}
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}
