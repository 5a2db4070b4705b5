package sqlserver_test

import (
	"strings"
	"testing"

	"github.com/berth-go/berth/transport/sqlserver"
)

// TestStrayPlanReadsLeaseIndex is TestPlansSeek for the stray statement,
// whose predicate cannot seek (state > 2 is no key): on a queue of 5,000
// pending rows, its actual plan reads the lease index — a scan of the
// fetched and processing rows only — and never scans the clustered index,
// the backlog. It runs when BERTH_TEST_SQLSERVER_URL is set; Babelfish has
// no showplan, so it skips there.
func TestStrayPlanReadsLeaseIndex(t *testing.T) {
	ctx, db, n, q := planQueue(t, "stray_plan")
	d := sqlserver.Dialect{}
	acc := accesses(t, actualPlans(t, ctx, db, d.DeadLetterStray(n, q, 1000)[0]))
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
