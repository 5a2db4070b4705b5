package sqlbench

import (
	"database/sql"
	"fmt"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlserver"
)

// Strategy names, as they appear in bench.Result.Strategy.
const (
	StrategyBerth        = "berth"
	StrategyPeek         = "peek-baseline"
	StrategyWatermillSQL = "watermill-sql"
)

// Strategies lists the compared strategies in the order they run.
var Strategies = []string{StrategyBerth, StrategyPeek, StrategyWatermillSQL}

// DefaultInstancePool is the connection pool size of each subscriber
// instance, for every strategy and on every database (Berth's
// postgres.DefaultMaxOpenConns; on SQL Server too, so that the scenario
// keeps its shape, rather than sqlserver.DefaultMaxOpenConns).
const DefaultInstancePool = postgres.DefaultMaxOpenConns

// strategy is one way of consuming a queue table.
type strategy struct {
	name string
	// isReceive classifies statements for the empty-claim count, where
	// the driver traces them (PostgreSQL).
	isReceive func(sql string) bool
	// initialize creates topic's tables, on db (not counted).
	initialize func(db *sql.DB, topic string) error
	// newPublisher returns the strategy's own publisher on db.
	newPublisher func(db *sql.DB) (message.Publisher, error)
	// newInstance returns one subscriber instance on its own pool.
	newInstance func(db *sql.DB, concurrency int) (instance, error)
}

// instance is one competing subscriber, as one process would run it.
type instance struct {
	message.Subscriber
	// engine returns Berth's engine counts (nil for watermill-sql).
	engine func() sqlqueue.Stats
	// peeks returns the baseline's peeks and empty peeks (nil otherwise).
	peeks func() (peeks, empty int64)
	// effect is the handler's write, before its ack (nil: none; effect.go).
	effect func(*message.Message) error
}

// isBerthClaim matches the engine's claim statements, Claim and
// ClaimDirect (and not the sweeper's, which also uses SKIP LOCKED).
func isBerthClaim(sql string) bool {
	return strings.Contains(sql, "SET state = 1, owner =") || strings.Contains(sql, "q.id = ANY(d.started)")
}

func strategyByName(name string) (strategy, error) {
	switch name {
	case StrategyBerth:
		return berthStrategy(), nil
	case StrategyPeek:
		return peekStrategy(), nil
	case StrategyWatermillSQL:
		return watermillSQLStrategy(), nil
	case StrategyLimit:
		return limitStrategy(), nil
	case StrategyBerthTx:
		return berthTxStrategy(), nil
	case StrategyBerthEffect:
		return berthEffectStrategy(), nil
	case StrategyWatermillSQLTx:
		return watermillSQLTxStrategy(), nil
	}
	return strategy{}, fmt.Errorf("sqlbench: unknown strategy %q", name)
}

func berthPublisher(db *sql.DB) (message.Publisher, error) {
	return postgres.NewPublisher(postgres.PublisherConfig{DB: db}, nil)
}

func berthInitialize(db *sql.DB, topic string) error {
	s, err := postgres.NewSubscriber(postgres.SubscriberConfig{DB: db}, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.SubscribeInitialize(topic)
}

// berthStrategy is Berth's subscriber: the shared pipeline's wave-sized
// set-based claims, no peek.
func berthStrategy() strategy {
	return strategy{
		name:         StrategyBerth,
		isReceive:    isBerthClaim,
		initialize:   berthInitialize,
		newPublisher: berthPublisher,
		newInstance: func(db *sql.DB, concurrency int) (instance, error) {
			s, err := postgres.NewSubscriber(postgres.SubscriberConfig{
				DB:       db,
				Pipeline: receiver.Config{Concurrency: concurrency},
			}, nil)
			if err != nil {
				return instance{}, err
			}
			return instance{Subscriber: s, engine: s.Stats}, nil
		},
	}
}

// peekStrategy is the classic peek-then-fan-out receive on Berth's engine.
func peekStrategy() strategy {
	return strategy{
		name:         StrategyPeek,
		isReceive:    isBerthClaim,
		initialize:   berthInitialize,
		newPublisher: berthPublisher,
		newInstance: func(db *sql.DB, concurrency int) (instance, error) {
			cfg := sqlqueue.SubscriberConfig{DB: db}
			if err := cfg.Validate(); err != nil {
				return instance{}, err
			}
			p := newPeekSubscriber(cfg, concurrency)
			return instance{
				Subscriber: p,
				engine:     func() sqlqueue.Stats { st, _, _ := p.stats(); return st },
				peeks:      func() (int64, int64) { _, n, e := p.stats(); return n, e },
			}, nil
		},
	}
}

// watermillSQLStrategy is github.com/ThreeDotsLabs/watermill-sql/v4 with its
// default PostgreSQL schema and offsets adapter (the documented setup).
// Its subscriber hands over one message at a time per subscription and holds
// a row lock on the consumer group's offset while it does, so competing
// instances take turns: handler concurrency is 1 for the whole group, whatever
// the instance count.
func watermillSQLStrategy() strategy {
	schema := wsql.DefaultPostgreSQLSchema{}
	offsets := wsql.DefaultPostgreSQLOffsetsAdapter{}
	newSub := func(db *sql.DB) (*wsql.Subscriber, error) {
		return wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wsql.SubscriberConfig{
			SchemaAdapter:  schema,
			OffsetsAdapter: offsets,
		}, nil)
	}
	return strategy{
		name: StrategyWatermillSQL,
		isReceive: func(sql string) bool {
			return strings.Contains(sql, "pg_snapshot_xmin")
		},
		initialize: func(db *sql.DB, topic string) error {
			s, err := newSub(db)
			if err != nil {
				return err
			}
			defer s.Close()
			return s.SubscribeInitialize(topic)
		},
		newPublisher: func(db *sql.DB) (message.Publisher, error) {
			return wsql.NewPublisher(wsql.BeginnerFromStdSQL(db), wsql.PublisherConfig{SchemaAdapter: schema}, nil)
		},
		newInstance: func(db *sql.DB, _ int) (instance, error) {
			s, err := newSub(db)
			if err != nil {
				return instance{}, err
			}
			return instance{Subscriber: s}, nil
		},
	}
}

// sqlServerBerthStrategy is Berth's SQL Server subscriber in schema: the
// same engine and pipeline as "berth" on PostgreSQL, with the SQL Server
// dialect. Subscribers in other pools get no wake-up from a Publish (SQL
// Server has no NOTIFY): they find new rows by their poll, as separate
// processes would.
func sqlServerBerthStrategy(schema string) strategy {
	tables := sqlqueue.Tables{Schema: schema}
	newSub := func(db *sql.DB, concurrency int) (*sqlqueue.Subscriber, error) {
		return sqlserver.NewSubscriber(sqlserver.SubscriberConfig{
			DB:       db,
			Tables:   tables,
			Pipeline: receiver.Config{Concurrency: concurrency},
		}, nil)
	}
	return strategy{
		name: StrategyBerth,
		initialize: func(db *sql.DB, topic string) error {
			s, err := newSub(db, 0)
			if err != nil {
				return err
			}
			defer s.Close()
			return s.SubscribeInitialize(topic)
		},
		newPublisher: func(db *sql.DB) (message.Publisher, error) {
			return sqlserver.NewPublisher(sqlserver.PublisherConfig{DB: db, Tables: tables}, nil)
		},
		newInstance: func(db *sql.DB, concurrency int) (instance, error) {
			s, err := newSub(db, concurrency)
			if err != nil {
				return instance{}, err
			}
			return instance{Subscriber: s, engine: s.Stats}, nil
		},
	}
}
