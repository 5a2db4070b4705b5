package postgres_test

import (
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// The DDL for DBAs who create tables by hand.
func ExampleDialect() {
	ddl := sqlqueue.DDL(postgres.Dialect{}, sqlqueue.Tables{}, sqlqueue.QueueRef{Topic: "orders"})
	fmt.Println(len(ddl) > 0)
	// Output: true
}

// A pool of your own (here, pgx's configuration with a custom
// application name) whose handler transactions still send BEGIN with
// their first Exec and commit with their settlement (two round trips for
// a handler that writes once): wrap pgx's connector with Connector, and
// pass the pool as the subscriber's DB (you close it).
func ExampleConnector() {
	cfg, err := pgx.ParseConfig("postgres://app@db.internal:5432/orders")
	if err != nil {
		panic(err)
	}
	cfg.RuntimeParams["application_name"] = "billing"
	db := sql.OpenDB(postgres.Connector(stdlib.GetConnector(*cfg)))
	defer db.Close()
	db.SetMaxOpenConns(postgres.DefaultSharedMaxConns)

	sub, err := postgres.NewSubscriber(postgres.SubscriberConfig{DB: db}, nil)
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	// sub.Subscribe(ctx, "orders"): handlers call transport.TxFromContext.
}
