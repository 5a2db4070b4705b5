package postgres_test

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// badRow is a row inserted by hand with plain SQL, as another tool (or a
// bug) might leave it, and what the subscriber must do with it.
type badRow struct {
	uuid    string
	headers string
	body    []byte
	dead    bool   // dead-lettered with a reason; else handled
	payload []byte // when handled
}

func badRows() []badRow {
	return []badRow{
		{uuid: "not-json", headers: "not json", body: []byte("x"), dead: true},
		{uuid: "wrong-type", headers: `{"a":1}`, body: []byte("x"), dead: true},
		{uuid: "bool-value", headers: `{"a":true}`, body: []byte("x"), dead: true},
		{uuid: "array", headers: `[1,2]`, body: []byte("x"), dead: true},
		{uuid: "nested", headers: `{"a":{"b":"c"}}`, body: []byte("x"), dead: true},
		{uuid: "truncated", headers: `{"a":"b`, body: []byte("x"), dead: true},
		{uuid: "number", headers: `42`, body: []byte("x"), dead: true},
		{uuid: "empty-headers", headers: "", body: []byte("e"), payload: []byte("e")},
		{uuid: "null-headers", headers: "null", body: []byte("n"), payload: []byte("n")},
		{uuid: "plain-sql", headers: "{}", body: []byte("hello from psql"), payload: []byte("hello from psql")},
		{uuid: "binary-body", headers: "{}", body: []byte{0xff, 0, 0xfe}, payload: []byte{0xff, 0, 0xfe}},
		{uuid: "empty-body", headers: "{}", body: []byte{}, payload: []byte{}},
		{uuid: "lone-surrogate", headers: `{"k":"\ud800"}`, body: []byte("s"), payload: []byte("s")},
		{uuid: "dup-key", headers: `{"a":"1","a":"2"}`, body: []byte("d"), payload: []byte("d")},
		{uuid: "big-body", headers: "{}", body: bytes.Repeat([]byte("b"), 3<<20), payload: bytes.Repeat([]byte("b"), 3<<20)},
		{uuid: "", headers: "{}", body: []byte("no uuid"), payload: []byte("no uuid")},
	}
}

// TestBadInput inserts malformed rows by hand and checks that each is either
// handled or dead-lettered with a reason, and that the loop keeps running: a
// valid message published after them is delivered. (PostgreSQL's column
// types refuse NULL headers and invalid UTF-8 text at insert, so those
// cannot reach the subscriber.)
func TestBadInput(t *testing.T) {
	db := openDB(t, 4)
	topic := "bad_input"
	c := testPipeline()
	c.DB = db
	sub, err := postgres.NewSubscriber(postgres.SubscriberConfig{SubscriberConfig: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	q := sub.Queue(topic)
	rows := badRows()
	for _, r := range rows {
		if _, err := db.Exec(`INSERT INTO `+q.Table+` (uuid, headers, body) VALUES ($1, $2, $3)`, r.uuid, r.headers, r.body); err != nil {
			t.Fatalf("insert %q: %v", r.uuid, err)
		}
	}
	// Rows that bypass the text column's checks: NULL and a wrong type.
	for _, stmt := range []string{
		`INSERT INTO ` + q.Table + ` (uuid, headers, body) VALUES ('null-headers-sql', 'null'::json::text, '\x00')`,
		`INSERT INTO ` + q.Table + ` (uuid, headers, body) VALUES ('int-as-headers', 7::text, convert_to('seven', 'UTF8'))`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	rows = append(rows,
		badRow{uuid: "null-headers-sql", payload: []byte{0}},
		badRow{uuid: "int-as-headers", dead: true},
	)

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
	// valid UTF-8 (JSON-encoded, it comes back with U+FFFD).
	pub := newPub(t, db)
	after := message.NewMessage("valid-after", []byte("ok"))
	after.Metadata.Set("bad\xffkey", "bad\xfevalue")
	if err := pub.Publish(topic, after); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := got["valid-after"]
		return ok
	})
	waitFor(t, 30*time.Second, func() bool {
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
	rs, err := db.Query(`SELECT message_uuid, reason FROM `+q.Errors+` WHERE queue_table = $1`, q.Name)
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
