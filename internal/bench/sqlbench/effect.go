package sqlbench

import (
	"context"
	"database/sql"
	"errors"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// The strategies of the exactly-once comparison (docs/benchmarks.md,
// "Exactly-once effects"): each handler writes one row, its effect, into a
// user table of the queue's database.
const (
	// StrategyBerthTx writes the effect in the handler's transaction
	// (transport.TxFromContext), committed with the ack.
	StrategyBerthTx = "berth-tx"
	// StrategyBerthEffect writes it in a statement of its own before the
	// ack (at-least-once: the usual batched ack, the effect not fenced).
	StrategyBerthEffect = "berth-effect"
	// StrategyWatermillSQLTx writes it in watermill-sql's consume-side
	// transaction (sql.TxFromContext).
	StrategyWatermillSQLTx = "watermill-sql-tx"
)

// TxStrategies are the strategies of the exactly-once comparison, on
// PostgreSQL; "berth" (no effect) is the baseline.
var TxStrategies = []string{StrategyBerth, StrategyBerthEffect, StrategyBerthTx, StrategyWatermillSQLTx}

// effectTable holds the effects, in each run's schema.
const effectTable = "sqlbench_effects"

const insertEffect = `INSERT INTO ` + effectTable + ` (uuid) VALUES ($1) ON CONFLICT DO NOTHING`

func createEffects(db *sql.DB) error {
	_, err := db.Exec(`CREATE TABLE IF NOT EXISTS ` + effectTable + ` (uuid text PRIMARY KEY)`)
	return err
}

// withEffects adds the effect table to st's initialize and effect to its
// instances.
func withEffects(st strategy, name string, effect func(db *sql.DB) func(*message.Message) error) strategy {
	init, newInstance := st.initialize, st.newInstance
	st.name = name
	st.initialize = func(db *sql.DB, topic string) error {
		if err := createEffects(db); err != nil {
			return err
		}
		return init(db, topic)
	}
	st.newInstance = func(db *sql.DB, concurrency int) (instance, error) {
		in, err := newInstance(db, concurrency)
		in.effect = effect(db)
		return in, err
	}
	return st
}

func berthTxStrategy() strategy {
	return withEffects(berthStrategy(), StrategyBerthTx, func(*sql.DB) func(*message.Message) error {
		return func(msg *message.Message) error {
			tx, err := transport.TxFromContext(msg.Context())
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(msg.Context(), insertEffect, msg.UUID)
			return err
		}
	})
}

func berthEffectStrategy() strategy {
	return withEffects(berthStrategy(), StrategyBerthEffect, func(db *sql.DB) func(*message.Message) error {
		return func(msg *message.Message) error {
			ctx, cancel := context.WithTimeout(msg.Context(), 30*time.Second)
			defer cancel()
			_, err := db.ExecContext(ctx, insertEffect, msg.UUID)
			return err
		}
	})
}

func watermillSQLTxStrategy() strategy {
	return withEffects(watermillSQLStrategy(), StrategyWatermillSQLTx, func(*sql.DB) func(*message.Message) error {
		return func(msg *message.Message) error {
			tx, ok := wsql.TxFromContext(msg.Context())
			if !ok {
				return errors.New("sqlbench: watermill-sql gave no transaction")
			}
			_, err := tx.ExecContext(msg.Context(), insertEffect, msg.UUID)
			return err
		}
	})
}
