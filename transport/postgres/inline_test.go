package postgres_test

import (
	"bytes"
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// inlineFixture is a queue table with row 1 processing under owner 7, and
// a table "effects" for a handler's write.
func inlineFixture(t *testing.T, db *sql.DB, topic string) sqlqueue.Queue {
	t.Helper()
	q := newSource(t, db, topic).Queue()
	execAll(t, db,
		`CREATE TABLE IF NOT EXISTS effects_`+topic+` (n int)`,
		`INSERT INTO `+q.Table+` (uuid, headers, body, state, owner, lease_until)
		 VALUES ('a', '{}', '\x00'::bytea, 2, 7, now() + interval '1 minute')`,
	)
	return q
}

// counts reads, from a connection of its own, how many queue rows and
// effects are committed.
func counts(t *testing.T, other *sql.DB, q sqlqueue.Queue, topic string) (rows, effects int) {
	t.Helper()
	if err := other.QueryRow(`SELECT (SELECT count(*) FROM `+q.Table+`), (SELECT count(*) FROM effects_`+topic+`)`).Scan(&rows, &effects); err != nil {
		t.Fatal(err)
	}
	return rows, effects
}

// On a pool of Open's, the handler transaction's settlement carries its
// COMMIT: once the statement has returned, another connection sees the
// row gone and the handler's write committed, before Commit is called;
// Commit then sends nothing and succeeds, and the connection serves the
// next transaction. On a plain pgx pool the same statement commits
// nothing until Commit.
func TestSettlementCommitsInOneRoundTrip(t *testing.T) {
	url := testenv.PostgresSchemaURL(t)
	other := openDBAt(t, url)
	plain, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close() })
	d := postgres.Dialect{}
	for _, c := range []struct {
		name   string
		db     *sql.DB
		inline bool
	}{{"open", openDBAt(t, url), true}, {"plain", plain, false}} {
		c.db.SetMaxOpenConns(1) // one connection: the one that committed is checked
		t.Run(c.name, func(t *testing.T) {
			topic := "inline_" + c.name
			q := inlineFixture(t, other, topic)
			ctx := context.Background()
			tx, err := c.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects_`+topic+` VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			st := d.CompleteCommit(q, sqlqueue.Ref{ID: 1, Owner: 7})
			if _, err := tx.ExecContext(ctx, st.SQL, st.Args...); err != nil {
				t.Fatal(err)
			}
			rows, effects := counts(t, other, q, topic)
			if committed := rows == 0 && effects == 1; committed != c.inline {
				t.Fatalf("after the settlement: %d rows, %d effects committed; want committed = %v", rows, effects, c.inline)
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			if rows, effects := counts(t, other, q, topic); rows != 0 || effects != 1 {
				t.Fatalf("after Commit: %d rows, %d effects", rows, effects)
			}
			// The connection is back in the pool, out of any transaction.
			for range 3 {
				tx, err := c.db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
			}
			conn, err := c.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			assertIdle(t, conn)
		})
	}
}

// assertIdle fails t unless conn's pgx connection is out of any
// transaction.
func assertIdle(t *testing.T, conn *sql.Conn) {
	t.Helper()
	if err := conn.Raw(func(dc any) error {
		if st := dc.(interface{ Conn() *pgx.Conn }).Conn().PgConn().TxStatus(); st != 'I' {
			t.Errorf("the connection is in transaction status %q, want idle", st)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A settlement whose row is no longer the lease's fails (LeaseLost), and
// with it the transaction: the COMMIT sent with it does not run, and the
// handler's write is rolled back.
func TestSettlementCommitFencedByTheLease(t *testing.T) {
	url := testenv.PostgresSchemaURL(t)
	db, other := openDBAt(t, url), openDBAt(t, url)
	db.SetMaxOpenConns(1)
	topic := "inline_lost"
	q := inlineFixture(t, other, topic)
	d := postgres.Dialect{}
	ctx := context.Background()
	for _, ref := range []sqlqueue.Ref{{ID: 1, Owner: 8}, {ID: 2, Owner: 7}} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO effects_`+topic+` VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		st := d.CompleteCommit(q, ref)
		_, err = tx.ExecContext(ctx, st.SQL, st.Args...)
		if !d.LeaseLost(err) {
			t.Fatalf("ref %+v: %v, want the lease lost", ref, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if rows, effects := counts(t, other, q, topic); rows != 1 || effects != 0 {
			t.Fatalf("ref %+v: %d rows, %d effects committed; want 1 row, no effect", ref, rows, effects)
		}
	}
	if d.LeaseLost(errors.New("22P02 "+"berth: lease lost")) || d.LeaseLost(nil) || d.LeaseLost(pgx.ErrTxCommitRollback) {
		t.Error("LeaseLost is true of an error that is not the settlement's")
	}
}

// writeCounter counts the writes to a connection's socket: one per round
// trip, since pgx writes what it sends before it waits for the answer.
// database/sql's check of a connection it reuses (pgx's ping) is not
// counted.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c writeCounter) Write(p []byte) (int, error) {
	if !bytes.Contains(p, []byte("-- ping")) {
		c.n.Add(1)
	}
	return c.Conn.Write(p)
}

// A handler transaction that writes with one Exec costs two round trips
// on a Connector's pool: BEGIN goes with the Exec, the settlement with
// the COMMIT. On a plain pgx pool it costs four.
func TestHandlerTxInTwoRoundTrips(t *testing.T) {
	url := testenv.PostgresSchemaURL(t)
	other := openDBAt(t, url)
	d := postgres.Dialect{}
	for _, c := range []struct {
		name   string
		inline bool
		mode   pgx.QueryExecMode // the pool's default, as with PgBouncer
		want   int64
	}{
		{"connector", true, pgx.QueryExecModeCacheStatement, 2},
		{"connector_simple", true, pgx.QueryExecModeSimpleProtocol, 2},
		{"plain", false, pgx.QueryExecModeCacheStatement, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := pgx.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			cfg.DefaultQueryExecMode = c.mode
			var writes atomic.Int64
			var dialer net.Dialer
			cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := dialer.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return writeCounter{nc, &writes}, nil
			}
			var conn sqldriver.Connector = stdlib.GetConnector(*cfg)
			if c.inline {
				conn = postgres.Connector(conn)
			}
			db := sql.OpenDB(conn)
			t.Cleanup(func() { _ = db.Close() })
			db.SetMaxOpenConns(1)
			topic := "rt_" + c.name
			q := inlineFixture(t, other, topic)
			execAll(t, other, `INSERT INTO `+q.Table+` (uuid, headers, body, state, owner, lease_until)
				VALUES ('b', '{}', '\x00'::bytea, 2, 7, now() + interval '1 minute')`)
			ctx := context.Background()
			// The first transaction prepares the statements on the
			// connection; the second is counted.
			for i, counted := range []bool{false, true} {
				before := writes.Load()
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO effects_`+topic+` VALUES ($1)`, i); err != nil {
					t.Fatal(err)
				}
				st := d.CompleteCommit(q, sqlqueue.Ref{ID: int64(i + 1), Owner: 7})
				if _, err := tx.ExecContext(ctx, st.SQL, st.Args...); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				if n := writes.Load() - before; counted && n != c.want {
					t.Errorf("the transaction took %d round trips, want %d", n, c.want)
				}
			}
			if rows, effects := counts(t, other, q, topic); rows != 0 || effects != 2 {
				t.Fatalf("%d rows left, %d effects committed; want 0 and 2", rows, effects)
			}
		})
	}
}

// Whatever a transaction runs first (an Exec, one given pgx's
// QueryExecMode, a query, a prepared statement, a statement on the pgx connection under database/sql's
// Conn.Raw, a failing statement, or nothing), it runs in the transaction
// on a Connector's pool as on a plain pgx pool: rolled back, it leaves
// nothing; committed, it stays; options are kept; the connection goes
// back to the pool idle.
func TestBeginWithTheFirstStatement(t *testing.T) {
	url := testenv.PostgresSchemaURL(t)
	other := openDBAt(t, url)
	execAll(t, other, `CREATE TABLE IF NOT EXISTS firsts (name text)`)
	plain, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close() })
	ctx := context.Background()
	firsts := map[string]func(*testing.T, *sql.Conn, *sql.Tx, string){
		"exec": func(t *testing.T, _ *sql.Conn, tx *sql.Tx, name string) {
			if _, err := tx.ExecContext(ctx, `INSERT INTO firsts VALUES ($1)`, name); err != nil {
				t.Fatal(err)
			}
		},
		"exec mode": func(t *testing.T, _ *sql.Conn, tx *sql.Tx, name string) {
			if _, err := tx.ExecContext(ctx, `INSERT INTO firsts VALUES ($1)`, pgx.QueryExecModeSimpleProtocol, name); err != nil {
				t.Fatal(err)
			}
		},
		"query": func(t *testing.T, _ *sql.Conn, tx *sql.Tx, name string) {
			var got string
			if err := tx.QueryRowContext(ctx, `INSERT INTO firsts VALUES ($1) RETURNING name`, name).Scan(&got); err != nil {
				t.Fatal(err)
			}
		},
		"prepare": func(t *testing.T, _ *sql.Conn, tx *sql.Tx, name string) {
			st, err := tx.PrepareContext(ctx, `INSERT INTO firsts VALUES ($1)`)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := st.ExecContext(ctx, name); err != nil {
				t.Fatal(err)
			}
		},
		"raw": func(t *testing.T, conn *sql.Conn, _ *sql.Tx, name string) {
			if err := conn.Raw(func(dc any) error {
				_, err := dc.(interface{ Conn() *pgx.Conn }).Conn().Exec(ctx, `INSERT INTO firsts VALUES ($1)`, name)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		},
	}
	committed := func(name string) bool {
		var n int
		if err := other.QueryRow(`SELECT count(*) FROM firsts WHERE name = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	for _, p := range []struct {
		name string
		db   *sql.DB
	}{{"open", openDBAt(t, url)}, {"plain", plain}} {
		p.db.SetMaxOpenConns(1)
		t.Run(p.name, func(t *testing.T) {
			for first, run := range firsts {
				for _, commit := range []bool{false, true} {
					name := fmt.Sprintf("%s-%s-%v", p.name, first, commit)
					conn, err := p.db.Conn(ctx)
					if err != nil {
						t.Fatal(err)
					}
					tx, err := conn.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					run(t, conn, tx, name)
					if commit {
						err = tx.Commit()
					} else {
						err = tx.Rollback()
					}
					if err != nil {
						t.Fatal(err)
					}
					if got := committed(name); got != commit {
						t.Errorf("%s first, commit %v: the row is committed: %v", first, commit, got)
					}
					assertIdle(t, conn)
					_ = conn.Close()
				}
			}
			conn, err := p.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Nothing run: Commit and Rollback succeed.
			for _, end := range []func(*sql.Tx) error{(*sql.Tx).Commit, (*sql.Tx).Rollback} {
				tx, err := conn.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := end(tx); err != nil {
					t.Fatalf("ending an empty transaction: %v", err)
				}
				assertIdle(t, conn)
			}
			// A failing first statement: the transaction has begun, and is
			// aborted.
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO no_such_table VALUES (1)`); err == nil {
				t.Fatal("an insert into a missing table succeeded")
			}
			var pe *pgconn.PgError
			if _, err := tx.ExecContext(ctx, `SELECT 1`); !errors.As(err, &pe) || pe.Code != "25P02" {
				t.Errorf("a statement after the failed one: %v, want 25P02 (in failed transaction)", err)
			}
			if err := tx.Commit(); !errors.Is(err, pgx.ErrTxCommitRollback) {
				t.Errorf("Commit of the failed transaction: %v, want %v", err, pgx.ErrTxCommitRollback)
			}
			assertIdle(t, conn)
			// Options are kept.
			tx, err = conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			var iso, ro string
			if err := tx.QueryRowContext(ctx, `SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only')`).Scan(&iso, &ro); err != nil {
				t.Fatal(err)
			}
			if iso != "serializable" || ro != "on" {
				t.Errorf("isolation %q, read only %q; want serializable, on", iso, ro)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			assertIdle(t, conn)
		})
	}
}
