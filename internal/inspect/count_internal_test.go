package inspect

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/transport/sqlqueue"
)

// stateLiteral finds a comparison of the state column with a literal.
var stateLiteral = regexp.MustCompile(`\bstate\s*(=|<>|>|<)\s*[0-9]`)

// On SQL Server, the counting statement (the console's queue list, its
// sampler and `berth queues`) compares state with literals, which the
// filtered pending index matches only while they stay literals: under
// forced parameterization the server makes them parameters, except in a
// statement that references a variable or a client parameter. So the
// statement compares due_at with a declared @now, declared in the same
// batch before it (docs/transports/sqlserver.md, Forced parameterization).
func TestSQLServerCountEscapesForcedParameterization(t *testing.T) {
	s := &SQL{Kind: "sqlserver"}
	q := sqlqueue.Queue{Name: "berth_q_orders", Table: "[app].[berth_q_orders]"}
	for _, upTo := range []int64{0, 10_000} {
		query, args := s.countQuery(q, upTo)
		if len(args) != 0 {
			t.Errorf("upTo %d: %d arguments, want none (now is the server's)", upTo, len(args))
		}
		decl := strings.Index(query, "DECLARE @now datetime2(3) = SYSUTCDATETIME();")
		sel := strings.Index(query, "SELECT")
		if decl < 0 || sel < decl {
			t.Fatalf("upTo %d: @now is not declared before the SELECT:\n%s", upTo, query)
		}
		count := query[sel:]
		if !stateLiteral.MatchString(count) || !strings.Contains(count, "due_at <= @now") || !strings.Contains(count, "due_at > @now") {
			t.Errorf("upTo %d: the SELECT does not compare state with a literal and due_at with @now:\n%s", upTo, count)
		}
		if strings.Contains(count, "SYSUTCDATETIME()") {
			t.Errorf("upTo %d: the SELECT still reads the clock itself:\n%s", upTo, count)
		}
	}
	// The other databases keep their statement: no declaration.
	for _, kind := range []string{"postgres", "sqlite"} {
		query, _ := (&SQL{Kind: kind, now: time.Now}).countQuery(q, 0)
		if strings.Contains(query, "@now") || !strings.HasPrefix(query, "SELECT") {
			t.Errorf("%s: %s", kind, query)
		}
	}
}

// The message pages' state conditions compare due_at with @now on SQL
// Server too, and the page's text declares it; a state without a time
// condition declares nothing.
func TestSQLServerPagesDeclareNow(t *testing.T) {
	s := &SQL{Kind: "sqlserver"}
	for _, st := range []MessageState{StatePending, StateDelayed, StateInFlight, StateAll} {
		b := &qb{s: s}
		cond := s.stateCond(b, st)
		text := b.text("SELECT TOP (51) id FROM [app].[berth_q_orders] WHERE " + cond + " ORDER BY due_at, id")
		usesNow := strings.Contains(cond, "@now")
		declared := strings.HasPrefix(text, sqlServerNow)
		if usesNow != declared {
			t.Errorf("%s: condition %q uses @now %v, text declares it %v:\n%s", st, cond, usesNow, declared, text)
		}
		if strings.Contains(cond, "SYSUTCDATETIME") {
			t.Errorf("%s: %q reads the clock in the statement itself", st, cond)
		}
		if (st == StatePending || st == StateDelayed) && !(usesNow && stateLiteral.MatchString(cond)) {
			t.Errorf("%s: %q, want state = 0 and due_at against @now", st, cond)
		}
	}
}
