package sqlserver_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlserver"
)

// TestStrayPlanReadsLeaseIndex is TestPlansSeek for the stray statement,
// whose predicate cannot seek (state > 2 is no key): on a queue of 5,000
// pending rows, its actual plan reads the lease index — a scan of the
// fetched and processing rows only — and never scans the clustered index,
// the backlog. It runs when BERTH_TEST_SQLSERVER_URL is set; Babelfish has
// no showplan, so it skips there.
func TestStrayPlanReadsLeaseIndex(t *testing.T) {
	base := testenv.SQLServerURL(t)
	db := openAdmin(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var babelfish sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT CAST(SERVERPROPERTY('babelfish') AS nvarchar(20))`).Scan(&babelfish); err == nil && babelfish.Valid {
		t.Skip("Babelfish has no SQL Server showplan")
	}
	schema := testenv.UniqueName("berth")
	t.Cleanup(func() { dropSchema(t, db, schema) })
	u, _ := url.Parse(base)
	cfg, err := sqlserver.ParsePublisherURL(u)
	if err != nil {
		t.Fatal(err)
	}
	pcfg := sqlserver.PublisherConfig{DSN: cfg.DSN}
	pcfg.Tables.Schema = schema
	pub, err := sqlserver.NewPublisher(pcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	msgs := make([]*message.Message, 5000)
	for i := range msgs {
		msgs[i] = message.NewMessage(fmt.Sprint(i), []byte("x"))
	}
	if err := pub.Publish("stray_plan", msgs...); err != nil {
		t.Fatal(err)
	}
	d := sqlserver.Dialect{}
	tables := sqlqueue.Tables{Schema: schema}
	q := sqlqueue.QueueFor(d, tables, "stray_plan", "")
	acc := accesses(t, actualPlans(t, ctx, db, d.DeadLetterStray(sqlqueue.NamesFor(d, tables), q, 1000)[0]))
	leased := false
	for _, a := range acc {
		if a.Table != q.Name {
			continue // the table variable, the error table
		}
		if a.Index == q.Name+"_leased" {
			leased = true
			continue
		}
		if strings.HasSuffix(a.Op, "Scan") {
			t.Errorf("%s of %s.%s", a.Op, a.Table, a.Index)
		}
	}
	if !leased {
		t.Errorf("the lease index is not read; accesses: %+v", acc)
	}
}
