package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"
)

// openFake opens a pool over go-mssqldb on a fake TDS server.
func openFake(t *testing.T) (*fakeTDS, *sql.DB) {
	t.Helper()
	f := startFakeTDS(t)
	db, err := sql.Open("sqlserver", f.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() }) // runs before the fake stops
	return f, db
}

// TestFakeTDSDeclsFollowLengths shows what go-mssqldb declares for a
// string and a []byte: nvarchar(n) and varbinary(n) of the value's length,
// so the same statement with other lengths is another plan-cache key.
func TestFakeTDSDeclsFollowLengths(t *testing.T) {
	f, db := openFake(t)
	ctx := t.Context()
	const stmt = "SELECT @p1, @p2, @p3"
	if _, err := db.ExecContext(ctx, stmt, "abc", []byte("xy"), int64(7)); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, stmt, "abcd", []byte("xyz"), int64(-8))
	if err != nil {
		t.Fatal(err)
	}
	if rows.Next() {
		t.Error("the fake returned a row")
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	want := []rpcCall{
		{Stmt: stmt, Decls: "@p1 nvarchar(3),@p2 varbinary(2),@p3 bigint", Args: []any{"abc", []byte("xy"), int64(7)}},
		{Stmt: stmt, Decls: "@p1 nvarchar(4),@p2 varbinary(3),@p3 bigint", Args: []any{"abcd", []byte("xyz"), int64(-8)}},
	}
	if got := f.Calls(); !reflect.DeepEqual(got, want) {
		t.Errorf("calls:\n got %#v\nwant %#v", got, want)
	}
}

// TestFakeTDSLongStrings: a string over 4,000 UTF-16 units, and any
// mssql.NVarCharMax, is declared nvarchar(max) and sent PLP-encoded over
// several packets; 4,000 units is still nvarchar(4000).
func TestFakeTDSLongStrings(t *testing.T) {
	f, db := openFake(t)
	long := strings.Repeat("x€", 2500)  // 5,000 characters, not all ASCII
	limit := strings.Repeat("x€", 2000) // 4,000
	cases := []struct {
		arg  any
		decl string
		want string
	}{
		{mssql.NVarCharMax(long), "@p1 nvarchar(max)", long},
		{long, "@p1 nvarchar(max)", long},
		{mssql.NVarCharMax("ab"), "@p1 nvarchar(max)", "ab"},
		{limit, "@p1 nvarchar(4000)", limit},
	}
	for i, c := range cases {
		if _, err := db.ExecContext(t.Context(), "SELECT @p1", c.arg); err != nil {
			t.Fatal(err)
		}
		calls := f.Calls()
		got := calls[len(calls)-1]
		if got.Decls != c.decl {
			t.Errorf("case %d: decls %q, want %q", i, got.Decls, c.decl)
		}
		if len(got.Args) != 1 || got.Args[0] != c.want {
			t.Errorf("case %d: the value did not arrive intact (%d args)", i, len(got.Args))
		}
	}
}

// TestFakeTDSFailNext: an ERROR token reaches the caller as mssql.Error,
// and the connection stays usable.
func TestFakeTDSFailNext(t *testing.T) {
	f, db := openFake(t)
	ctx := t.Context()
	f.FailNext(1205, "deadlock")
	_, err := db.ExecContext(ctx, "UPDATE t SET v = @p1", int64(1))
	var me mssql.Error
	if !errors.As(err, &me) || me.Number != 1205 || me.Message != "deadlock" {
		t.Fatalf("err = %v, want mssql.Error 1205", err)
	}
	if _, err := db.ExecContext(ctx, "UPDATE t SET v = @p1", int64(2)); err != nil {
		t.Fatalf("the call after the failure: %v", err)
	}
	if n := len(f.Calls()); n != 2 {
		t.Errorf("%d calls recorded, want 2", n)
	}
}

// TestFakeTDSStallNext: a call cancelled while the server has not answered
// sends an ATTENTION; its acknowledgement ends the call with
// context.Canceled, and the connection stays usable.
func TestFakeTDSStallNext(t *testing.T) {
	f, db := openFake(t)
	conn, err := db.Conn(t.Context()) // one connection throughout
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	f.StallNext()
	ctx, cancel := context.WithCancel(t.Context())
	go func() { // cancel once the fake holds the call
		for len(f.Calls()) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := conn.ExecContext(ctx, "WAITFOR DELAY @p1", "00:01"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, err := conn.ExecContext(t.Context(), "SELECT @p1", int64(1)); err != nil {
		t.Fatalf("the call after the cancelled one: %v", err)
	}
	if n := len(f.Calls()); n != 2 {
		t.Errorf("%d calls recorded, want 2", n)
	}
}

// TestFakeTDSBatchesAndTransactions: a statement without arguments goes as
// a SQL batch, not through sp_executesql; transactions begin and commit.
func TestFakeTDSBatchesAndTransactions(t *testing.T) {
	f, db := openFake(t)
	ctx := t.Context()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "SET NOCOUNT ON"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM t WHERE id = @p1", int64(1)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, want := f.Batches(), []string{"select 1;", "SET NOCOUNT ON"}; !reflect.DeepEqual(got, want) {
		t.Errorf("batches %q, want %q", got, want)
	}
	if got := f.Calls(); len(got) != 1 || got[0].Decls != "@p1 bigint" {
		t.Errorf("calls %#v", got)
	}
}
