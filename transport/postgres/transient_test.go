package postgres_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berth-go/berth/transport/postgres"
)

func TestTransientClassification(t *testing.T) {
	state := func(code string) error { return fmt.Errorf("complete: %w", &pgconn.PgError{Code: code, Message: "m"}) }
	// A real connection error: nothing listens on port 1.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, connectErr := pgconn.Connect(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5")
	var ce *pgconn.ConnectError
	if !errors.As(connectErr, &ce) {
		t.Fatalf("connecting to a closed port = %v, want a *pgconn.ConnectError", connectErr)
	}
	cases := []struct {
		name                    string
		err                     error
		transient, notCommitted bool
	}{
		{"serialization failure 40001", state("40001"), true, true},
		{"deadlock 40P01", state("40P01"), true, true},
		{"lock not available 55P03", state("55P03"), true, true},
		{"cannot connect now 57P03", state("57P03"), true, true},
		{"too many connections 53300", state("53300"), true, true},
		{"admin shutdown 57P01", state("57P01"), true, false},
		{"crash shutdown 57P02", state("57P02"), true, false},
		{"connection failure 08006", state("08006"), true, false},
		{"protocol violation 08P01", state("08P01"), true, false},
		{"undefined table 42P01", state("42P01"), false, false},
		{"unique violation 23505", state("23505"), false, false},
		{"query canceled 57014", state("57014"), false, false},
		{"connect refused", connectErr, true, true},
		{"bad conn", fmt.Errorf("begin: %w", driver.ErrBadConn), true, true},
		{"reset mid-statement", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true, false},
		{"unexpected EOF", io.ErrUnexpectedEOF, true, false},
		{"cancelled", context.Canceled, false, false},
		{"other", errors.New("40P01"), false, false},
		{"nil", nil, false, false},
	}
	d := postgres.Dialect{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := d.IsTransient(c.err); got != c.transient {
				t.Errorf("IsTransient = %v, want %v", got, c.transient)
			}
			if got := d.NotCommitted(c.err); got != c.notCommitted {
				t.Errorf("NotCommitted = %v, want %v", got, c.notCommitted)
			}
		})
	}
}
