package sqlqueue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestQueueTableName(t *testing.T) {
	seen := map[string]string{}
	for _, tg := range [][2]string{
		{"orders", ""}, {"orders", "billing"}, {"orders__billing", ""}, {"Orders", ""},
		{"topic-4f1c1c9e-9d55-4b7e-8d7b-1d2f6c3c1a11", "cg_6a0c8a8e-2f7e-4a51-9c57-6b0f0d6e2b10"},
		{"topic-4f1c1c9e-9d55-4b7e-8d7b-1d2f6c3c1a11", "cg_6a0c8a8e-2f7e-4a51-9c57-6b0f0d6e2b11"},
	} {
		n := sqlqueue.QueueTableName("berth_", tg[0], tg[1])
		if len(n) > 48 {
			t.Errorf("%v → %q longer than 48", tg, n)
		}
		if prev, dup := seen[n]; dup {
			t.Errorf("%v and %s share table %q", tg, prev, n)
		}
		seen[n] = tg[0] + "/" + tg[1]
	}
	if got := sqlqueue.QueueTableName("berth_", "orders", "billing"); got != "berth_q_orders__billing" {
		t.Errorf("plain name = %q", got)
	}
}

func TestConfigValidateReportsEveryField(t *testing.T) {
	err := sqlqueue.SubscriberConfig{Lease: 1, SettleBatch: -1, MaxOpenConns: -1, Tables: sqlqueue.Tables{Prefix: "Bad-"}}.Validate()
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, field := range []string{"DSN: required when DB is nil", "MaxOpenConns", "Lease", "SettleBatch", "Tables.Prefix"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
	err = sqlqueue.PublisherConfig{MaxMessageSize: -1, TTL: -1}.Validate()
	for _, field := range []string{"DSN: required when DB is nil", "MaxMessageSize", "TTL"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("publisher error does not name %s: %v", field, err)
		}
	}
}

// noPools is a dialect that opens no pool of its own (no PoolOpener).
type noPools struct{ sqlqueue.Dialect }

// The constructors check what depends on their dialect argument: that there
// is one, that it can open a pool for DSN, the FleetInterval support; and
// the constructors that open no pool require DB.
func TestConstructorsCheckTheDialect(t *testing.T) {
	has := func(err error, want string) {
		t.Helper()
		if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want ErrInvalidConfig naming %q", err, want)
		}
	}
	_, err := sqlqueue.NewSubscriber(nil, sqlqueue.SubscriberConfig{DSN: "x"}, nil)
	has(err, "dialect: required")
	_, err = sqlqueue.NewPublisher(nil, sqlqueue.PublisherConfig{DSN: "x"}, nil)
	has(err, "dialect: required")
	d := noPools{sqlite.Dialect{}}
	_, err = sqlqueue.NewSubscriber(d, sqlqueue.SubscriberConfig{DSN: "x", FleetInterval: time.Second}, nil)
	has(err, "DB: required: the sqlite dialect opens no pool from DSN")
	has(err, "FleetInterval: the sqlite dialect keeps no fleet tables")
	_, err = sqlqueue.NewPublisher(d, sqlqueue.PublisherConfig{DSN: "x"}, nil)
	has(err, "DB: required: the sqlite dialect opens no pool from DSN")
	_, err = sqlqueue.NewSource(context.Background(), sqlite.Dialect{}, sqlqueue.SubscriberConfig{DSN: "x"}, "t", nil)
	has(err, "DB: required (NewSource and NewFleetReporter open no pool from DSN)")
	_, err = sqlqueue.NewFleetReporter(sqlite.Dialect{}, sqlqueue.SubscriberConfig{FleetInterval: time.Second}, nil, nil)
	has(err, "DB: required (NewSource and NewFleetReporter open no pool from DSN)")
}
