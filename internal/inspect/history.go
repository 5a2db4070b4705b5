package inspect

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The console's stored history: one row per queue and minute in
// <prefix>console_history, written by a read-write console and read by
// any, so a restarted console still shows the last day. Times are Unix
// milliseconds (BIGINT) on every engine, so the statements need no
// per-dialect timestamp type.

// HistorySample is one queue's counts at one time, as stored.
type HistorySample struct {
	Queue                                  string
	At                                     time.Time
	Ready, Delayed, InFlight, DeadLettered int64
}

// HistoryName is the unquoted name of the console's history table.
func (s *SQL) HistoryName() string { return s.Tables.Prefix + "console_history" }

func (s *SQL) historyTable() string {
	name := s.Dialect.QuoteIdent(s.HistoryName())
	if s.Tables.Schema == "" {
		return name
	}
	return s.Dialect.QuoteIdent(s.Tables.Schema) + "." + name
}

func (s *SQL) createHistory(ctx context.Context) error {
	cols := `(
	queue_name    VARCHAR(255) NOT NULL,
	at_ms         BIGINT NOT NULL,
	ready         BIGINT NOT NULL,
	delayed       BIGINT NOT NULL,
	in_flight     BIGINT NOT NULL,
	dead_lettered BIGINT NOT NULL,
	PRIMARY KEY (queue_name, at_ms)
)`
	q := `CREATE TABLE IF NOT EXISTS ` + s.historyTable() + ` ` + cols
	if s.Kind == "sqlserver" {
		q = `IF OBJECT_ID(N'` + s.historyTable() + `', N'U') IS NULL CREATE TABLE ` + s.historyTable() + ` ` + cols
	}
	if _, err := s.DB.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("create %s: %w", s.HistoryName(), err)
	}
	return nil
}

// RecordHistory stores qs as the samples of the minute at (truncated to
// the minute; a minute already stored for a queue is kept as it is, so
// two consoles write each minute once) and deletes each queue's samples
// older than before. It creates the table the first time.
func (s *SQL) RecordHistory(ctx context.Context, at time.Time, qs []QueueStats, before time.Time) error {
	if len(qs) == 0 {
		return nil
	}
	if err := s.createHistory(ctx); err != nil {
		return err
	}
	t, cut := at.Truncate(time.Minute).UnixMilli(), before.UnixMilli()
	tbl := s.historyTable()
	ins := `INSERT INTO ` + tbl + ` (queue_name, at_ms, ready, delayed, in_flight, dead_lettered) VALUES (` +
		s.ph(1) + `, ` + s.ph(2) + `, ` + s.ph(3) + `, ` + s.ph(4) + `, ` + s.ph(5) + `, ` + s.ph(6) + `) ON CONFLICT DO NOTHING`
	if s.Kind == "sqlserver" {
		ins = `INSERT INTO ` + tbl + ` (queue_name, at_ms, ready, delayed, in_flight, dead_lettered) SELECT ` +
			s.ph(1) + `, ` + s.ph(2) + `, ` + s.ph(3) + `, ` + s.ph(4) + `, ` + s.ph(5) + `, ` + s.ph(6) +
			` WHERE NOT EXISTS (SELECT 1 FROM ` + tbl + ` WITH (UPDLOCK, HOLDLOCK) WHERE queue_name = ` + s.ph(1) + ` AND at_ms = ` + s.ph(2) + `)`
	}
	del := `DELETE FROM ` + tbl + ` WHERE queue_name = ` + s.ph(1) + ` AND at_ms < ` + s.ph(2)
	return s.inTx(ctx, func(tx *sql.Tx) error {
		for _, q := range qs {
			if q.Missing {
				continue
			}
			if _, err := tx.ExecContext(ctx, ins, q.Queue, t, q.Ready, q.Delayed, q.InFlight, q.DeadLettered); err != nil {
				return fmt.Errorf("record history of %s: %w", q.Queue, err)
			}
			if _, err := tx.ExecContext(ctx, del, q.Queue, cut); err != nil {
				return fmt.Errorf("prune history of %s: %w", q.Queue, err)
			}
		}
		return nil
	})
}

// History returns the stored samples taken at or after since, by queue
// and time. Without a history table (no read-write console has run) it
// returns none.
func (s *SQL) History(ctx context.Context, since time.Time) ([]HistorySample, error) {
	ok, err := s.tableExists(ctx, s.HistoryName())
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	if !ok {
		return nil, nil
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT queue_name, at_ms, ready, delayed, in_flight, dead_lettered FROM `+
		s.historyTable()+` WHERE at_ms >= `+s.ph(1)+` ORDER BY queue_name, at_ms`, since.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer rows.Close()
	var out []HistorySample
	for rows.Next() {
		var h HistorySample
		var ms int64
		if err := rows.Scan(&h.Queue, &ms, &h.Ready, &h.Delayed, &h.InFlight, &h.DeadLettered); err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		h.At = time.UnixMilli(ms)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return out, nil
}
