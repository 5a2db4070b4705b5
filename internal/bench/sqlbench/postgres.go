package sqlbench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuxRole is the role the harness creates, when it may, for its own
// connections (publisher, schema setup, measurements), so that
// pg_stat_statements can tell the subscribers' statements apart.
const AuxRole = "berth_sqlbench_aux"

// postgresDB is a PostgreSQL server and what the harness can measure on it.
type postgresDB struct {
	url     string
	auxUser string // "" when the URL's user is used for everything
	admin   *sql.DB
	cpu     *serverCPU      // nil when the server is not local
	pgss    *statStatements // nil when unavailable
	remarks []string
}

var _ database = (*postgresDB)(nil)

// openPostgres connects to the server and finds what it can measure.
func openPostgres(ctx context.Context, rawURL string) (*postgresDB, error) {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("sqlbench: parse URL: %w", err)
	}
	p := &postgresDB{url: rawURL}
	admin, err := OpenPool(PoolConfig{URL: rawURL, MaxConns: 2})
	if err != nil {
		return nil, err
	}
	if err := admin.PingContext(ctx); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("sqlbench: connect: %w", err)
	}
	p.admin = admin
	// A separate role for the harness lets pg_stat_statements count only the
	// subscribers. Creating it needs superuser; without it, statements of
	// the harness count too and the cross-check says so.
	if pgss := newStatStatements(ctx, admin, cfg.User); pgss != nil {
		_, err := admin.ExecContext(ctx, `DO $$ BEGIN
IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '`+AuxRole+`') THEN
	CREATE ROLE `+AuxRole+` SUPERUSER LOGIN;
END IF; END $$`)
		if err == nil {
			aux, err := OpenPool(PoolConfig{URL: rawURL, User: AuxRole, MaxConns: 2})
			if err == nil && aux.PingContext(ctx) == nil {
				_ = admin.Close()
				p.admin, p.auxUser = aux, AuxRole
			} else if aux != nil {
				_ = aux.Close()
			}
		}
		if p.auxUser == "" {
			p.remarks = append(p.remarks, "pg_stat_statements includes the publisher's statements (no separate role)")
		}
		p.pgss = pgss
		p.pgss.db = p.admin
	}
	if cpu, err := newServerCPU(ctx, p.admin); err == nil {
		p.cpu = cpu
		p.admin.SetMaxIdleConns(2)
		// The harness's own backends are not the strategy's cost.
		if err := p.excludeAdmin(ctx); err != nil {
			p.cpu = nil
		}
	} else {
		p.remarks = append(p.remarks, "no DB CPU: "+err.Error())
	}
	return p, nil
}

// excludeAdmin leaves the admin pool's backends out of the CPU count.
func (p *postgresDB) excludeAdmin(ctx context.Context) error {
	conns := make([]*sql.Conn, 0, 2)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range 2 {
		c, err := p.admin.Conn(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		var pid int
		if err := c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		p.cpu.Exclude(pid)
	}
	return nil
}

func (p *postgresDB) name() string           { return "postgres" }
func (p *postgresDB) resultDatabase() string { return "" }
func (p *postgresDB) strategies() []string {
	return append(append([]string(nil), DrainStrategies...), StrategyBerthTx, StrategyBerthEffect, StrategyWatermillSQLTx)
}
func (p *postgresDB) tracesStatements() bool { return true }
func (p *postgresDB) notes() []string        { return p.remarks }
func (p *postgresDB) close() error           { return p.admin.Close() }

func (p *postgresDB) newRun(ctx context.Context) (dbRun, error) {
	schema := uniqueSchema("sqlbench")
	if _, err := p.admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		return nil, fmt.Errorf("sqlbench: create schema: %w", err)
	}
	return &postgresRun{db: p, schema: schema}, nil
}

// postgresRun is one run's schema on PostgreSQL (the connections' search
// path) and its measurements.
type postgresRun struct {
	db        *postgresDB
	schema    string
	cpuBefore cpuSample
}

func (r *postgresRun) strategy(name string) (strategy, error) { return strategyByName(name) }

// publisherPool's backends are left out of the CPU count, and run under
// AuxRole when there is one.
func (r *postgresRun) publisherPool() (*sql.DB, error) {
	return OpenPool(PoolConfig{URL: r.db.url, User: r.db.auxUser, Schema: r.schema, MaxConns: 4, OnConnect: func(pid uint32) {
		if r.db.cpu != nil {
			r.db.cpu.Exclude(int(pid))
		}
	}})
}

func (r *postgresRun) instancePool(maxConns int, ctr *Counter) (*sql.DB, error) {
	return OpenPool(PoolConfig{URL: r.db.url, Schema: r.schema, MaxConns: maxConns, Counter: ctr})
}

// analyze implements analyzer: ANALYZE of every table in the run's schema.
func (r *postgresRun) analyze(ctx context.Context) error {
	rows, err := r.db.admin.QueryContext(ctx, `SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE schemaname = $1`, r.schema)
	if err != nil {
		return err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := r.db.admin.ExecContext(ctx, `ANALYZE `+t); err != nil {
			return err
		}
	}
	return nil
}

func (r *postgresRun) begin(ctx context.Context) error {
	if r.db.pgss != nil {
		if err := r.db.pgss.Reset(ctx); err != nil {
			return err
		}
	}
	if r.db.cpu != nil {
		r.db.cpu.Quiesce(10 * time.Second)
		s, err := r.db.cpu.Sample()
		if err != nil {
			return err
		}
		r.cpuBefore = s
	}
	return nil
}

func (r *postgresRun) midWindow(_ context.Context, tr *tracker, lo, hi int) *midWindow {
	if r.db.cpu == nil {
		return nil
	}
	return startMidWindow(r.db.cpu.Sample, cpuSample.Since, tr, lo, hi)
}

func (r *postgresRun) lastAck(context.Context) error { return nil }

// end reads pg_stat_statements and the server's CPU. Backends of closed
// connections keep their CPU time in the postmaster's cutime; Quiesce waits
// until every one of the run's has exited.
func (r *postgresRun) end(ctx context.Context, m map[string]float64, per func(float64) float64) ([]string, error) {
	if r.db.pgss != nil {
		calls, err := r.db.pgss.Calls(ctx)
		if err != nil {
			return nil, err
		}
		m["pgss_calls_per_msg"] = per(float64(calls))
	}
	if r.db.cpu != nil {
		r.db.cpu.Quiesce(10 * time.Second)
		after, err := r.db.cpu.Sample()
		if err != nil {
			return nil, err
		}
		m["db_cpu_ms_per_msg"] = per(float64(after.Since(r.cpuBefore)) / float64(time.Millisecond))
	}
	return nil, nil
}

func (r *postgresRun) drop(ctx context.Context) error {
	_, err := r.db.admin.ExecContext(ctx, `DROP SCHEMA `+r.schema+` CASCADE`)
	return err
}
