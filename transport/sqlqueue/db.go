package sqlqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"

	"sync/atomic"

	"github.com/berth-go/berth/transport"
)

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// query runs st, counting one round trip on rt, and calls scan for every
// row of every result set (T-SQL batches may put their output in a later
// result set, and errors surface only once every result set is drained).
func query(ctx context.Context, q querier, rt *atomic.Int64, st Stmt, scan func(*sql.Rows) error) error {
	rt.Add(1)
	rows, err := q.QueryContext(ctx, st.SQL, st.Args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for {
		for rows.Next() {
			if scan != nil {
				if err := scan(rows); err != nil {
					return err
				}
			}
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// queryIDs runs st and returns the first column of every row as int64.
func queryIDs(ctx context.Context, q querier, rt *atomic.Int64, st Stmt) ([]int64, error) {
	var ids []int64
	err := query(ctx, q, rt, st, func(r *sql.Rows) error {
		var id int64
		if err := r.Scan(&id); err != nil {
			return err
		}
		ids = append(ids, id)
		return nil
	})
	return ids, err
}

// queryCount runs st and returns how many rows it returned.
func queryCount(ctx context.Context, q querier, rt *atomic.Int64, st Stmt) (int, error) {
	n := 0
	err := query(ctx, q, rt, st, func(*sql.Rows) error { n++; return nil })
	return n, err
}

// runAll runs stmts in order and returns the first column of every row the
// last one returned, as int64 (0 when it is not an integer).
func runAll(ctx context.Context, q querier, rt *atomic.Int64, stmts []Stmt) ([]int64, error) {
	var last []int64
	for i, st := range stmts {
		if i < len(stmts)-1 {
			if err := query(ctx, q, rt, st, nil); err != nil {
				return nil, err
			}
			continue
		}
		err := query(ctx, q, rt, st, func(r *sql.Rows) error {
			cols, err := r.Columns()
			if err != nil {
				return err
			}
			dest := make([]any, len(cols))
			for j := range dest {
				dest[j] = new(any)
			}
			if err := r.Scan(dest...); err != nil {
				return err
			}
			last = append(last, asInt64(*dest[0].(*any)))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return last, nil
}

// inTx runs fn in a transaction, counting BEGIN and COMMIT/ROLLBACK on tx.
func inTx(ctx context.Context, db *sql.DB, tx *atomic.Int64, fn func(*sql.Tx) error) (err error) {
	tx.Add(1)
	t, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		tx.Add(1)
		if err != nil {
			_ = t.Rollback()
			return
		}
		if cerr := t.Commit(); cerr != nil {
			err = fmt.Errorf("commit: %w", cerr)
		}
	}()
	return fn(t)
}

// scanBool reads a one-row, one-column lock result (bool or integer).
func lockAcquired(ctx context.Context, q querier, rt *atomic.Int64, st Stmt) (bool, error) {
	var got any
	seen := false
	err := query(ctx, q, rt, st, func(r *sql.Rows) error {
		if seen {
			return nil
		}
		seen = true
		return r.Scan(&got)
	})
	if err != nil {
		return false, err
	}
	switch v := got.(type) {
	case bool:
		return v, nil
	case int64:
		return v != 0, nil
	case int32:
		return v != 0, nil
	case []byte:
		return len(v) > 0 && v[0] != '0' && v[0] != 'f', nil
	case string:
		return v != "" && v != "0" && v != "f" && v != "false", nil
	case nil:
		return false, errors.New("lock statement returned no row")
	}
	return false, fmt.Errorf("lock statement returned %T", got)
}

func asInt64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int32:
		return int64(x)
	case int:
		return int64(x)
	case []byte:
		var n int64
		_, _ = fmt.Sscan(string(x), &n)
		return n
	}
	return 0
}

// withPool returns db and closer as given or, when db is nil, a reference
// to d's shared pool of dsn (see PoolOpener) as both, and runs build on
// them; when build fails, the reference is dropped at once.
func withPool[T any](d Dialect, db *sql.DB, closer io.Closer, dsn string, maxConns int, build func(db *sql.DB, closer io.Closer) (T, error)) (T, error) {
	if db != nil {
		return build(db, closer)
	}
	var zero T
	po, ok := d.(PoolOpener)
	if !ok { // validate reported it
		return zero, fmt.Errorf("%w: DB: required", transport.ErrInvalidConfig)
	}
	db, closer, err := po.SharedPool(dsn, maxConns)
	if err != nil {
		return zero, err
	}
	v, err := build(db, closer)
	if err != nil {
		_ = closer.Close()
	}
	return v, err
}
