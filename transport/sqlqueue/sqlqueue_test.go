package sqlqueue_test

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/berth-go/berth/transport"
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
	err := sqlqueue.SubscriberConfig{Lease: 1, SettleBatch: -1, Tables: sqlqueue.Tables{Prefix: "Bad-"}}.Validate()
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, field := range []string{"DB", "Dialect", "Lease", "SettleBatch", "Tables.Prefix"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
	err = sqlqueue.PublisherConfig{MaxMessageSize: -1, TTL: -1}.Validate()
	for _, field := range []string{"DB", "Dialect", "MaxMessageSize", "TTL"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("publisher error does not name %s: %v", field, err)
		}
	}
}
