// Package inspecttest seeds SQL deployments with queues and dead letters
// for the tests of the operations tools (internal/inspect, the console).
package inspecttest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// Queue describes one queue to seed: its topic and how many messages of
// each state it holds.
type Queue struct {
	Topic                    string
	Ready, Delayed, InFlight int
	Dead                     []Dead
}

// Dead is one dead letter to seed.
type Dead struct {
	Reason   string
	Body     string
	Metadata string // JSON object; "" for {}
	Attempts int
	// Age is how long ago it failed; 0 for a minute.
	Age time.Duration
}

// Seed migrates the schema, subscribes each queue's topic, inserts its
// messages and its dead letters, and returns the queues' table names.
func Seed(t testing.TB, s *inspect.SQL, queues ...Queue) []string {
	t.Helper()
	ctx := context.Background()
	pairs := make([]sqlqueue.QueueRef, len(queues))
	for i, q := range queues {
		pairs[i] = sqlqueue.QueueRef{Topic: q.Topic}
	}
	if _, _, err := s.Migrate(ctx, pairs...); err != nil {
		t.Fatalf("inspecttest: migrate: %v", err)
	}
	var names []string
	for _, q := range queues {
		sq := sqlqueue.QueueFor(s.Dialect, s.Tables, q.Topic, "")
		names = append(names, sq.Name)
		exec(t, s, s.Dialect.Subscribe(s.Names, sq))
		var rows []sqlqueue.InsertRow
		for i := range q.Ready + q.InFlight {
			rows = append(rows, sqlqueue.InsertRow{UUID: q.Topic + "-r" + strconv.Itoa(i), Headers: []byte("{}"), Body: []byte("ready")})
		}
		for i := range q.Delayed {
			rows = append(rows, sqlqueue.InsertRow{UUID: q.Topic + "-d" + strconv.Itoa(i), Headers: []byte("{}"), Body: []byte("later"), Delay: time.Hour})
		}
		if len(rows) > 0 {
			for _, st := range s.Dialect.Insert(sq, rows) {
				exec(t, s, st)
			}
		}
		if q.InFlight > 0 {
			ids := `SELECT id FROM ` + sq.Table + ` WHERE state = 0 ORDER BY id LIMIT ` + strconv.Itoa(q.InFlight)
			if s.Kind == "sqlserver" {
				ids = `SELECT TOP (` + strconv.Itoa(q.InFlight) + `) id FROM ` + sq.Table + ` WHERE state = 0 ORDER BY id`
			}
			if _, err := s.DB.ExecContext(ctx, `UPDATE `+sq.Table+` SET state = 2, attempts = 1 WHERE id IN (`+ids+`)`); err != nil {
				t.Fatalf("inspecttest: mark in flight: %v", err)
			}
		}
		for i, d := range q.Dead {
			AddDead(t, s, sq.Name, i, d)
		}
	}
	return names
}

// AddDead inserts one row into the error table for queue table name.
func AddDead(t testing.TB, s *inspect.SQL, name string, n int, d Dead) {
	t.Helper()
	if d.Age == 0 {
		d.Age = time.Minute
	}
	if d.Metadata == "" {
		d.Metadata = "{}"
	}
	failed := time.Now().Add(-d.Age)
	var at any = failed.UTC()
	if s.Kind == "sqlite" {
		at = failed.UnixMilli()
	}
	ph := func(i int) string {
		switch s.Kind {
		case "postgres":
			return "$" + strconv.Itoa(i)
		case "sqlserver":
			return "@p" + strconv.Itoa(i)
		}
		return "?"
	}
	q := `INSERT INTO ` + s.Names.Errors + ` (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at, failed_at) VALUES (` +
		ph(1) + `, ` + ph(2) + `, ` + ph(3) + `, ` + ph(4) + `, ` + ph(5) + `, ` + ph(6) + `, ` + ph(7) + `, ` + ph(8) + `, ` + ph(9) + `)`
	uuid := name + "-dead-" + strconv.Itoa(n) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := s.DB.ExecContext(context.Background(), q, name, uuid, d.Metadata, []byte(d.Body), d.Attempts, d.Reason, n+1, at, at); err != nil {
		t.Fatalf("inspecttest: insert dead letter: %v", err)
	}
}

func exec(t testing.TB, s *inspect.SQL, st sqlqueue.Stmt) {
	t.Helper()
	rows, err := s.DB.QueryContext(context.Background(), st.SQL, st.Args...)
	if err != nil {
		t.Fatalf("inspecttest: %v", err)
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		t.Fatalf("inspecttest: %v", err)
	}
}
