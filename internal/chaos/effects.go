package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/inbox"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
)

// effectsTable holds the effects of Config.Effects: a counter per message
// id, in the queue's database (PostgreSQL, SQLite) or in a SQLite file
// behind the inbox (SQS).
const effectsTable = "chaos_effects"

// effects is the exactly-once ledger of a run (Config.Effects): every
// successful handling adds 1 to its message's counter in the handler's
// transaction, so each counter must end at exactly 1.
type effects struct {
	db    *sql.DB // creates and reads the table
	close func()
	ph    string       // the dialect's first placeholder
	in    *inbox.Inbox // SQS: the inbox's transactions carry the effects
	dir   string       // SQS: the SQLite file's directory, removed at close
}

// openEffects creates the effects table where the run's handlers write.
func (r *runner) openEffects(ctx context.Context) (*effects, error) {
	e := &effects{ph: "$1"}
	switch b := r.b.(type) {
	case *sqlBackend:
		db, closeDB, err := b.adminDB()
		if err != nil {
			return nil, err
		}
		e.db, e.close = db, closeDB
		if b.kind == "sqlite" {
			e.ph = "?"
		}
	case *sqsBackend:
		dir, err := os.MkdirTemp("", "berth-chaos-effects-")
		if err != nil {
			return nil, err
		}
		db, closer, err := sqlite.Open(filepath.Join(dir, "effects.db"))
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		e.db, e.dir, e.ph = db, dir, "?"
		e.close = func() { _ = closer.Close() }
	}
	if _, err := e.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+effectsTable+` (id VARCHAR(64) NOT NULL PRIMARY KEY, n INT NOT NULL)`); err != nil {
		e.release(ctx)
		return nil, fmt.Errorf("chaos: create %s: %w", effectsTable, err)
	}
	if _, ok := r.b.(*sqsBackend); ok {
		in, err := inbox.New(ctx, inbox.Config{DB: e.db, PruneInterval: -1})
		if err != nil {
			e.release(ctx)
			return nil, err
		}
		e.in = in
	}
	return e, nil
}

// apply adds 1 to msg's counter in the message's transaction: the
// handler's (SQL transports) or the inbox's (SQS).
func (e *effects) apply(msg *message.Message) error {
	tx, err := transport.TxFromContext(msg.Context())
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(msg.Context(), `INSERT INTO `+effectsTable+` (id, n) VALUES (`+e.ph+`, 1)
ON CONFLICT (id) DO UPDATE SET n = `+effectsTable+`.n + 1`, msg.UUID)
	return err
}

// counts reads every counter.
func (e *effects) counts(ctx context.Context) (map[string]int, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT id, n FROM `+effectsTable)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		m[id] = n
	}
	return m, rows.Err()
}

func (e *effects) release(ctx context.Context) {
	if e.in != nil {
		_ = e.in.Close(ctx)
	}
	if e.close != nil {
		e.close()
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// EffectCounts is the exactly-once verdict of a run with Config.Effects.
type EffectCounts struct {
	Checked bool
	Once    int      // non-poison messages whose effect was applied exactly once
	Missing int      // applied never (must be 0)
	Twice   int      // applied more than once (must be 0)
	Poison  int      // poison messages whose effect was applied (must be 0)
	Sample  []string // a few ids of the Missing, Twice and Poison ones
}

// effectCounts compares the counters with the ledger's publishes.
func (l *Ledger) effectCounts(got map[string]int) EffectCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := EffectCounts{Checked: true}
	for id, poison := range l.published {
		n := got[id]
		switch {
		case poison && n > 0:
			c.Poison++
		case poison:
			continue
		case n == 1:
			c.Once++
			continue
		case n == 0:
			c.Missing++
		default:
			c.Twice++
		}
		if len(c.Sample) < 10 {
			c.Sample = append(c.Sample, fmt.Sprintf("%s=%d", id, n))
		}
	}
	return c
}
