package sqlserver

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	mssql "github.com/microsoft/go-mssqldb"
)

func TestTransientClassification(t *testing.T) {
	num := func(n int32) error { return fmt.Errorf("complete: %w", mssql.Error{Number: n, Message: "m"}) }
	cases := []struct {
		name                            string
		err                             error
		transient, notCommitted, outage bool
	}{
		{"deadlock victim 1205", num(1205), true, true, false},
		{"lock timeout 1222", num(1222), true, true, false},
		{"no lock memory 1204", num(1204), true, true, true},
		{"database unavailable 40613", num(40613), true, true, true},
		{"service busy 40501", num(40501), true, true, true},
		{"cannot open database 4060", num(4060), true, true, true},
		{"read-secondary login 4221", num(4221), true, true, true},
		{"service error 40197", num(40197), true, false, true},
		{"service error 40143", num(40143), true, false, true},
		{"service error 40540", num(40540), true, false, true},
		{"not enough resources 49918", num(49918), true, false, true},
		{"too many create or update 49919", num(49919), true, false, true},
		{"too many operations 49920", num(49920), true, false, true},
		{"resource limit 10928", num(10928), true, false, true},
		{"minimum guarantee 10929", num(10929), true, false, true},
		{"login or pipe error 233", num(233), true, false, false},
		{"connection aborted 10053", num(10053), true, false, false},
		{"connection reset 10054", num(10054), true, false, false},
		{"connection timed out 10060", num(10060), true, false, false},
		{"network name gone 64", num(64), true, false, false},
		{"deadlock in the chain", mssql.Error{Number: 3621, All: []mssql.Error{{Number: 1205}, {Number: 3621}}}, true, true, false},
		{"fail-over in the chain", mssql.Error{Number: 3621, All: []mssql.Error{{Number: 3621}, {Number: 40613}}}, true, true, true},
		{"missing table 208", num(208), false, false, false},
		{"unique key 2627", num(2627), false, false, false},
		{"bad conn", fmt.Errorf("begin: %w", sqldriver.ErrBadConn), true, true, false},
		{"reset mid-statement", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true, false, false},
		{"unexpected EOF", io.ErrUnexpectedEOF, true, false, false},
		{"dial refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true, true, false},
		{"cancelled", context.Canceled, false, false, false},
		{"deadline", fmt.Errorf("claim: %w", context.DeadlineExceeded), false, false, false},
		{"other", errors.New("1205"), false, false, false},
		{"nil", nil, false, false, false},
	}
	d := Dialect{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := d.IsTransient(c.err); got != c.transient {
				t.Errorf("IsTransient = %v, want %v", got, c.transient)
			}
			if got := d.NotCommitted(c.err); got != c.notCommitted {
				t.Errorf("NotCommitted = %v, want %v", got, c.notCommitted)
			}
			if got := d.IsOutage(c.err); got != c.outage {
				t.Errorf("IsOutage = %v, want %v", got, c.outage)
			}
		})
	}
}

// SQL Server's deadlock victim as go-mssqldb returns it off the wire (the
// fake server answers the statement with error 1205) is transient and not
// committed, and the same statement sent again goes through.
func TestDeadlockVictimOffTheWire(t *testing.T) {
	f, db := openFake(t)
	d := Dialect{}
	st := d.Complete(testQueue, testRefs)
	run := func() error {
		rows, err := db.QueryContext(t.Context(), st.SQL, st.Args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
		}
		return rows.Err()
	}
	f.FailNext(1205, "Transaction (Process ID 52) was deadlocked on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction.")
	err := run()
	var me mssql.Error
	if !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("first run = %v, want mssql.Error 1205", err)
	}
	if !d.IsTransient(err) || !d.NotCommitted(err) {
		t.Fatalf("IsTransient %v, NotCommitted %v; want both", d.IsTransient(err), d.NotCommitted(err))
	}
	if err := run(); err != nil {
		t.Fatalf("second run = %v", err)
	}
	if calls := f.Calls(); len(calls) != 2 || calls[0].Stmt != calls[1].Stmt {
		t.Fatalf("%d calls reached the server, want the same statement twice", len(calls))
	}
}
