package sqlqueue_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // a driver that connects lazily

	"github.com/berth-go/berth/transport/sqlqueue"
)

func TestSharedPoolsOnePerDSN(t *testing.T) {
	opened := map[string]int{}
	s := &sqlqueue.SharedPools{Default: 10, Min: 2, Open: func(dsn string, n int) (*sql.DB, error) {
		opened[dsn]++
		db, err := sql.Open("pgx", dsn)
		if err == nil {
			db.SetMaxOpenConns(n)
		}
		return db, err
	}}
	a, ca, err := s.Get("postgres://a/x", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, cb, _ := s.Get("postgres://a/x", 25)
	c, cc, _ := s.Get("postgres://b/x", 1)
	if a != b || a == c || opened["postgres://a/x"] != 1 || s.Len() != 2 {
		t.Fatalf("pools: same DSN shared %v, other DSN apart %v, opened %v, len %d", a == b, a != c, opened, s.Len())
	}
	if got := a.Stats().MaxOpenConnections; got != 25 {
		t.Errorf("shared pool size %d, want the largest asked (25)", got)
	}
	if got := c.Stats().MaxOpenConnections; got != 2 {
		t.Errorf("pool size %d, want Min (2)", got)
	}
	_ = ca.Close()
	_ = ca.Close() // idempotent: drops one reference once
	if isClosed(a) {
		t.Fatal("closed while another user holds it")
	}
	_ = cb.Close()
	_ = cc.Close()
	if s.Len() != 0 {
		t.Fatalf("%d pools left open", s.Len())
	}
	if !isClosed(a) {
		t.Error("last reference did not close the pool")
	}
	d, cd, _ := s.Get("postgres://a/x", 0)
	defer cd.Close()
	if d == a || opened["postgres://a/x"] != 2 {
		t.Error("a DSN whose pool closed does not get a new one")
	}
}

// isClosed reports whether db was closed, without connecting: database/sql
// checks for a closed pool before the context.
func isClosed(db *sql.DB) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := db.Conn(ctx)
	return err != nil && !errors.Is(err, context.Canceled)
}
