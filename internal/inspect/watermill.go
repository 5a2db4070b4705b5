package inspect

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// ErrWatermillSchema is returned by ImportWatermillSQL for a source table
// that is neither watermill-sql's default PostgreSQL schema nor its
// PostgreSQL queue schema (MySQL, a custom adapter, no table).
var ErrWatermillSchema = errors.New("inspect: unsupported watermill-sql schema")

// Watermill-sql PostgreSQL schema adapters ImportWatermillSQL reads.
const (
	// WatermillDefault is DefaultPostgreSQLSchema with
	// DefaultPostgreSQLOffsetsAdapter: rows ordered by (transaction_id,
	// offset), each consumer group's position in watermill_offsets_<topic>.
	WatermillDefault = "postgresql"
	// WatermillQueue is PostgreSQLQueueSchema with
	// PostgreSQLQueueOffsetsAdapter: no consumer groups, a row is consumed
	// once acked (or deleted, with DeleteOnAck).
	WatermillQueue = "postgresql-queue"
)

// DefaultImportBatch is ImportOptions.Batch's default.
const DefaultImportBatch = 500

// ImportOptions say what ImportWatermillSQL copies.
type ImportOptions struct {
	// Topic is the watermill-sql topic (table watermill_<Topic>). Required.
	Topic string
	// Groups are the consumer groups to copy for; each watermill-sql group
	// becomes the Berth consumer group of the same name. Defaults to every
	// group in watermill_offsets_<Topic> (the default schema), or the
	// default group "" when there is none (and always for the queue
	// schema, which has no groups).
	Groups []string
	// Batch is how many messages one target transaction copies. Defaults
	// to DefaultImportBatch.
	Batch int
	// DryRun counts what would be copied and writes nothing.
	DryRun bool
	// AfterBatch, when set, is called after each committed batch with the
	// group and the number copied for it so far; an error stops the import
	// there (tests use it to interrupt a run).
	AfterBatch func(group string, copied int) error
}

// ImportResult is what ImportWatermillSQL did for one (topic, group).
type ImportResult struct {
	Topic, Group string
	// Queue is the Berth queue table the messages went to.
	Queue string
	// Schema is WatermillDefault or WatermillQueue.
	Schema string
	// Copied is the number of messages copied by this run (to copy, for a
	// dry run).
	Copied int
	// Skipped is the number of messages left out: consumed by the group
	// in watermill-sql, or copied by an earlier run.
	Skipped int
	// LastTxID and LastOffset are the position (watermill-sql's
	// transaction_id and offset; LastTxID 0 for the queue schema) up to
	// which the group's messages are now in Berth.
	LastTxID, LastOffset int64
}

// position is a place in a watermill-sql topic: rows are ordered by
// (tx, offset); tx is 0 for the queue schema.
type position struct{ tx, offset int64 }

func (p position) after(q position) bool {
	return p.tx > q.tx || p.tx == q.tx && p.offset > q.offset
}

// ImportWatermillSQL copies the messages of a watermill-sql topic in the
// PostgreSQL database src that each consumer group has not consumed yet
// into the Berth queue of (topic, group) at s: UUID, payload and metadata
// as they are (watermill_ordering_key-like keys are plain metadata; the
// Berth ordering key is taken from transport.MetadataOrderingKey as a
// publisher would). It creates the Berth schema and the groups' queue
// tables first (Migrate) and a progress table, <prefix>migrated_watermill,
// whose row for (topic, group) is updated in the same transaction as each
// batch's inserts: a second run, or a run after a crash, copies only what
// was not committed yet, never a message twice. Rows of transactions
// still in progress on src (transaction_id at or after the snapshot's
// xmin) are left for a later run, as watermill-sql's own subscriber
// leaves them. Stop watermill-sql's subscribers first: what they consume
// meanwhile may be copied too.
func (s *SQL) ImportWatermillSQL(ctx context.Context, src *sql.DB, o ImportOptions) ([]ImportResult, error) {
	if o.Topic == "" {
		return nil, fmt.Errorf("%w: ImportOptions.Topic: required", transport.ErrInvalidConfig)
	}
	if o.Batch <= 0 {
		o.Batch = DefaultImportBatch
	}
	if s.Kind == "sqlserver" {
		return nil, fmt.Errorf("%w: importing from watermill-sql targets postgres:// and sqlite:// only", transport.ErrInvalidConfig)
	}
	w := wmTopic{topic: o.Topic}
	if err := w.detect(ctx, src); err != nil {
		return nil, err
	}
	groups := o.Groups
	if len(groups) == 0 {
		var err error
		if groups, err = w.groups(ctx, src); err != nil {
			return nil, err
		}
	}
	if !o.DryRun {
		refs := make([]sqlqueue.QueueRef, len(groups))
		for i, g := range groups {
			refs[i] = sqlqueue.QueueRef{Topic: o.Topic, ConsumerGroup: g}
		}
		if _, _, err := s.Migrate(ctx, refs...); err != nil {
			return nil, err
		}
		if _, err := s.DB.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+s.progressTable()+` (
	topic          VARCHAR(255) NOT NULL,
	consumer_group VARCHAR(255) NOT NULL,
	last_tx        BIGINT NOT NULL,
	last_offset    BIGINT NOT NULL,
	copied         BIGINT NOT NULL,
	PRIMARY KEY (topic, consumer_group)
)`); err != nil {
			return nil, fmt.Errorf("create progress table: %w", err)
		}
	}
	var out []ImportResult
	for _, g := range groups {
		r, err := s.importGroup(ctx, src, &w, g, o)
		out = append(out, r)
		if err != nil {
			return out, fmt.Errorf("topic %q, group %q: %w", o.Topic, g, err)
		}
	}
	return out, nil
}

func (s *SQL) progressTable() string {
	name := s.Tables.Prefix + "migrated_watermill"
	if s.Tables.Schema == "" {
		return s.Dialect.QuoteIdent(name)
	}
	return s.Dialect.QuoteIdent(s.Tables.Schema) + "." + s.Dialect.QuoteIdent(name)
}

// progress returns the position recorded for (topic, group), and whether
// there is one.
func (s *SQL) progress(ctx context.Context, topic, group string) (position, bool, error) {
	var p position
	err := s.DB.QueryRowContext(ctx, `SELECT last_tx, last_offset FROM `+s.progressTable()+
		` WHERE topic = `+s.ph(1)+` AND consumer_group = `+s.ph(2), topic, group).Scan(&p.tx, &p.offset)
	if errors.Is(err, sql.ErrNoRows) {
		return position{}, false, nil
	}
	if err != nil {
		if s.tableMissing(ctx, s.Tables.Prefix+"migrated_watermill", err) {
			return position{}, false, nil // a dry run before any import
		}
		return position{}, false, fmt.Errorf("read progress: %w", err)
	}
	return p, true, nil
}

func (s *SQL) importGroup(ctx context.Context, src *sql.DB, w *wmTopic, group string, o ImportOptions) (ImportResult, error) {
	q := sqlqueue.QueueFor(s.Dialect, s.Tables, o.Topic, group)
	res := ImportResult{Topic: o.Topic, Group: group, Queue: q.Name, Schema: w.schema}
	start, err := w.consumed(ctx, src, group)
	if err != nil {
		return res, err
	}
	done, _, err := s.progress(ctx, o.Topic, group)
	if err != nil {
		return res, err
	}
	if done.after(start) {
		start = done
	}
	res.LastTxID, res.LastOffset = start.tx, start.offset
	if res.Skipped, err = w.countUpTo(ctx, src, start); err != nil {
		return res, err
	}
	if o.DryRun {
		n, err := w.countAfter(ctx, src, start)
		res.Copied = n
		return res, err
	}
	pos := start
	for {
		rows, last, err := w.batch(ctx, src, pos, o.Batch)
		if err != nil || len(rows) == 0 {
			return res, err
		}
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			for _, st := range s.Dialect.Insert(q, rows) {
				if err := s.exec(ctx, tx, st); err != nil {
					return fmt.Errorf("insert into %s: %w", q.Name, err)
				}
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+s.progressTable()+` WHERE topic = `+s.ph(1)+
				` AND consumer_group = `+s.ph(2), o.Topic, group); err != nil {
				return fmt.Errorf("progress: %w", err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.progressTable()+
				` (topic, consumer_group, last_tx, last_offset, copied) VALUES (`+
				s.ph(1)+`, `+s.ph(2)+`, `+s.ph(3)+`, `+s.ph(4)+`, `+s.ph(5)+`)`,
				o.Topic, group, last.tx, last.offset, int64(res.Copied+len(rows))); err != nil {
				return fmt.Errorf("progress: %w", err)
			}
			return nil
		})
		if err != nil {
			return res, err
		}
		pos = last
		res.Copied += len(rows)
		res.LastTxID, res.LastOffset = last.tx, last.offset
		if o.AfterBatch != nil {
			if err := o.AfterBatch(group, res.Copied); err != nil {
				return res, err
			}
		}
	}
}

// wmTopic reads one watermill-sql topic's tables on PostgreSQL.
type wmTopic struct {
	topic   string
	schema  string // WatermillDefault or WatermillQueue
	payload string // the payload column as bytea: JSON (the default) as its text
}

func (w *wmTopic) messages() string { return `"watermill_` + w.topic + `"` }
func (w *wmTopic) offsets() string  { return `"watermill_offsets_` + w.topic + `"` }

// detect tells the two schemas apart by their columns.
func (w *wmTopic) detect(ctx context.Context, src *sql.DB) error {
	rows, err := src.QueryContext(ctx, `SELECT column_name, data_type FROM information_schema.columns
WHERE table_name = $1 AND table_schema = ANY (current_schemas(false))`, "watermill_"+w.topic)
	if err != nil {
		return fmt.Errorf("read watermill-sql table of %q: %w", w.topic, err)
	}
	defer rows.Close()
	cols := map[string]bool{}
	for rows.Next() {
		var c, typ string
		if err := rows.Scan(&c, &typ); err != nil {
			return err
		}
		cols[c] = true
		if c == "payload" {
			w.payload = `convert_to(payload::text, 'UTF8')`
			if typ == "bytea" {
				w.payload = `payload`
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	switch {
	case cols["transaction_id"] && cols["offset"]:
		w.schema = WatermillDefault
	case cols["acked"] && cols["offset"]:
		w.schema = WatermillQueue
	case len(cols) == 0:
		return fmt.Errorf("%w: no table watermill_%s in the source's search path", ErrWatermillSchema, w.topic)
	default:
		return fmt.Errorf("%w: table watermill_%s has neither transaction_id (DefaultPostgreSQLSchema) nor acked (PostgreSQLQueueSchema)",
			ErrWatermillSchema, w.topic)
	}
	return nil
}

// groups returns the consumer groups in the offsets table, or [""].
func (w *wmTopic) groups(ctx context.Context, src *sql.DB) ([]string, error) {
	if w.schema == WatermillQueue {
		return []string{""}, nil
	}
	var exists bool
	if err := src.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, w.offsets()).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		return []string{""}, nil
	}
	rows, err := src.QueryContext(ctx, `SELECT consumer_group FROM `+w.offsets()+` ORDER BY consumer_group`)
	if err != nil {
		return nil, fmt.Errorf("read consumer groups: %w", err)
	}
	defer rows.Close()
	var gs []string
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return nil, err
		}
		gs = append(gs, g)
	}
	if len(gs) == 0 {
		gs = []string{""}
	}
	return gs, rows.Err()
}

// consumed returns the group's acked position (zero: nothing consumed).
func (w *wmTopic) consumed(ctx context.Context, src *sql.DB, group string) (position, error) {
	if w.schema == WatermillQueue {
		return position{}, nil // acked rows are filtered by the acked column
	}
	var exists bool
	if err := src.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, w.offsets()).Scan(&exists); err != nil || !exists {
		return position{}, err
	}
	var p position
	var acked sql.NullInt64
	err := src.QueryRowContext(ctx, `SELECT offset_acked, last_processed_transaction_id::text::bigint FROM `+w.offsets()+
		` WHERE consumer_group = $1`, group).Scan(&acked, &p.tx)
	if errors.Is(err, sql.ErrNoRows) {
		return position{}, nil
	}
	if err != nil {
		return position{}, fmt.Errorf("read offset of group %q: %w", group, err)
	}
	p.offset = acked.Int64
	return p, nil
}

// pending is the condition of the rows after $1 (tx), $2 (offset) that a
// group has yet to consume: committed before every transaction still open
// (watermill-sql's rule), or not acked.
func (w *wmTopic) pending() string {
	if w.schema == WatermillQueue {
		return `NOT acked AND "offset" > $2 AND $1::bigint = 0`
	}
	return `(transaction_id, "offset") > ($1::bigint::text::xid8, $2) AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())`
}

func (w *wmTopic) countAfter(ctx context.Context, src *sql.DB, p position) (int, error) {
	var n int
	err := src.QueryRowContext(ctx, `SELECT count(*) FROM `+w.messages()+` WHERE `+w.pending(), p.tx, p.offset).Scan(&n)
	return n, err
}

// countUpTo counts the rows the group has consumed or an earlier run
// copied.
func (w *wmTopic) countUpTo(ctx context.Context, src *sql.DB, p position) (int, error) {
	cond := `(transaction_id, "offset") <= ($1::bigint::text::xid8, $2)`
	if w.schema == WatermillQueue {
		cond = `(acked OR "offset" <= $2) AND $1::bigint = 0`
	}
	var n int
	err := src.QueryRowContext(ctx, `SELECT count(*) FROM `+w.messages()+` WHERE `+cond, p.tx, p.offset).Scan(&n)
	return n, err
}

// batch reads up to n pending rows after p, as Berth rows, and the
// position of the last.
func (w *wmTopic) batch(ctx context.Context, src *sql.DB, p position, n int) ([]sqlqueue.InsertRow, position, error) {
	tx := `0`
	order := `"offset"`
	if w.schema == WatermillDefault {
		tx = `transaction_id::text::bigint`
		order = `transaction_id, "offset"`
	}
	rows, err := src.QueryContext(ctx, `SELECT `+tx+`, "offset", uuid, `+w.payload+`, metadata::text FROM `+w.messages()+
		` WHERE `+w.pending()+` ORDER BY `+order+` LIMIT `+strconv.Itoa(n), p.tx, p.offset)
	if err != nil {
		return nil, p, fmt.Errorf("read watermill_%s: %w", w.topic, err)
	}
	defer rows.Close()
	var out []sqlqueue.InsertRow
	for rows.Next() {
		var (
			uuid string
			body []byte
			md   sql.NullString
		)
		if err := rows.Scan(&p.tx, &p.offset, &uuid, &body, &md); err != nil {
			return nil, p, err
		}
		meta := map[string]string{}
		if md.Valid && md.String != "" && md.String != "null" {
			if err := json.Unmarshal([]byte(md.String), &meta); err != nil {
				return nil, p, fmt.Errorf("message %s (offset %d): metadata is not a JSON object of strings: %w", uuid, p.offset, err)
			}
		}
		headers, err := json.Marshal(meta)
		if err != nil {
			return nil, p, err
		}
		if body == nil {
			body = []byte{}
		}
		out = append(out, sqlqueue.InsertRow{UUID: uuid, Headers: headers, Body: body,
			OrderingKey: meta[transport.MetadataOrderingKey]})
	}
	return out, p, rows.Err()
}
