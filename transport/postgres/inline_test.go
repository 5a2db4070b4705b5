package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

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
			if err := conn.Raw(func(dc any) error {
				if st := dc.(interface{ Conn() *pgx.Conn }).Conn().PgConn().TxStatus(); st != 'I' {
					t.Errorf("the pool's connection is in transaction status %q, want idle", st)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
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
