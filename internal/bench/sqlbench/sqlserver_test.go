package sqlbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	mssql "github.com/microsoft/go-mssqldb"
	"github.com/microsoft/go-mssqldb/msdsn"

	"github.com/berth-go/berth/internal/bench"
	"github.com/berth-go/berth/internal/sqlservertest"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlserver"
)

func TestSQLServerDSN(t *testing.T) {
	for _, tc := range []struct {
		name, url, database string
	}{
		{"plain", "sqlserver://sa:secret@127.0.0.1:1433?database=test", "test"},
		{"app name replaced", "sqlserver://sa:secret@db?App+Name=theirs&database=q&encrypt=disable", "q"},
		{"driver parameter in another case", "sqlserver://sa:secret@db?DATABASE=x&TrustServerCertificate=true", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn, err := sqlServerDSN(tc.url, "berth-sqlbench-x")
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := msdsn.Parse(dsn)
			if err != nil {
				t.Fatalf("go-mssqldb refuses %q: %v", dsn, err)
			}
			if cfg.AppName != "berth-sqlbench-x" || cfg.Database != tc.database || cfg.Password != "secret" {
				t.Fatalf("parsed app name %q, database %q, password kept %v", cfg.AppName, cfg.Database, cfg.Password == "secret")
			}
			if _, err := sqlServerConnector(dsn); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Entra ID authentication goes through go-mssqldb's azuread package, as
	// in transport/sqlserver; its connector takes the counting dialer too.
	dsn, err := sqlServerDSN("sqlserver://db.example:1433?database=q&fedauth=ActiveDirectoryDefault", "a")
	if err != nil {
		t.Fatal(err)
	}
	db, err := openSQLServerPool(dsn, 1, NewCounter(nil))
	if err != nil {
		t.Fatalf("fedauth: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, url, want string
	}{
		{"berth parameters", "sqlserver://sa:secret@db?database=x&concurrency=32&schema=s", "concurrency, schema"},
		{"another scheme", "postgres://sa:secret@db/x", `scheme "postgres"`},
		{"does not parse", "sqlserver://sa:secret@db:port?x", "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sqlServerDSN(tc.url, "a")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("the error repeats the password: %v", err)
			}
		})
	}
}

// The harness's own batches follow the rules of SQL Server's grammar that
// transport/sqlserver's checkGrammar enforces on the dialect: EXEC(…) takes
// only literals and variables (so dynamic SQL goes through sp_executesql),
// and no SELECT @v += … (or @v = @v + …) over rows, whose result is
// undefined. They bind @p1 alone, and the DMV queries take their patterns as
// arguments so that their own text never matches them.
func TestSQLServerBatchesParse(t *testing.T) {
	execParen := regexp.MustCompile(`(?i)\bEXEC(UTE)?\s*\(`)
	aggConcat := regexp.MustCompile(`(?i)\bSELECT\s+(TOP\s*\(\d+\)\s*)?@\w+\s*(\+=|=\s*@\w+\s*\+)`)
	params := regexp.MustCompile(`@p\d+`)
	for name, tc := range map[string]struct {
		sql    string
		params []string
	}{
		"createSchemaSQL": {createSchemaSQL, []string{"@p1"}},
		"dropSchemaSQL":   {sqlservertest.DropSchemaSQL, []string{"@p1"}},
		"statementCPUSQL": {statementCPUSQL, []string{"@p1", "@p2", "@p3"}},
		"sessionCPUSQL":   {sessionCPUSQL, []string{"@p1"}},
		"transactionsSQL": {transactionsSQL, nil},
	} {
		if execParen.MatchString(tc.sql) {
			t.Errorf("%s: EXEC( … ) — run dynamic SQL with sp_executesql", name)
		}
		if m := aggConcat.FindString(tc.sql); m != "" {
			t.Errorf("%s: aggregate concatenation %q", name, m)
		}
		got := slices.Compact(slices.Sorted(slices.Values(params.FindAllString(tc.sql, -1))))
		if !slices.Equal(got, tc.params) {
			t.Errorf("%s binds %v, want %v", name, got, tc.params)
		}
		if !strings.HasPrefix(tc.sql, "SET NOCOUNT ON;\n") {
			t.Errorf("%s does not start with SET NOCOUNT ON (row counts would come back as results)", name)
		}
	}
	for _, s := range []string{createSchemaSQL, sqlservertest.DropSchemaSQL} {
		if !strings.Contains(s, "QUOTENAME(") || !strings.Contains(s, "EXEC sp_executesql @sql;") {
			t.Errorf("want names quoted with QUOTENAME and run through sp_executesql:\n%s", s)
		}
	}
}

// runMarkers must tell the publisher's statements from every statement a
// subscriber sends, on the dialect as it is: a change to either side of
// transport/sqlserver's SQL fails here rather than skewing the server's CPU.
func TestRunMarkersMatchTheDialect(t *testing.T) {
	const schema = "sqlbench_0123abcd"
	schemaMark, insertMark, lookupMark := runMarkers(schema)
	d := sqlserver.Dialect{}
	tables := sqlqueue.Tables{Schema: schema}
	n := sqlqueue.NamesFor(d, tables)
	q := sqlqueue.QueueFor(d, tables, topic, "")
	for name, st := range map[string]sqlqueue.Stmt{
		"Insert":        d.Insert(q, []sqlqueue.InsertRow{{UUID: "u", Headers: []byte("{}"), Body: []byte("b")}})[0],
		"Subscriptions": d.Subscriptions(n, topic),
	} {
		if !strings.Contains(st.SQL, schemaMark) || !strings.Contains(st.SQL, insertMark) && !strings.Contains(st.SQL, lookupMark) {
			t.Errorf("the publisher's %s is not told apart:\n%s", name, st.SQL)
		}
	}
	ref := sqlqueue.Ref{ID: 1, Owner: 2}
	subscriber := map[string][]sqlqueue.Stmt{
		"Claim":             {d.Claim(q, 2, 10, time.Minute)},
		"Begin":             {d.Begin(q, []sqlqueue.Ref{ref}, time.Minute)},
		"Complete":          {d.Complete(q, []sqlqueue.Ref{ref})},
		"Renew":             {d.Renew(q, []sqlqueue.Ref{ref}, time.Minute)},
		"Retry":             {d.Retry(q, []sqlqueue.RetryRef{{Ref: ref, Delay: time.Second}})},
		"Release":           {d.Release(q, []sqlqueue.Ref{ref})},
		"DeadLetter":        d.DeadLetter(n, q, ref, "r"),
		"Recover":           {d.Recover(q, 5, 100)},
		"DeadLetterExpired": d.DeadLetterExpired(n, q, 5, "r", 100),
		"DropExpired":       {d.DropExpired(q, 100)},
		"Subscribe":         {d.Subscribe(n, q)},
		"SchemaVersion":     {d.SchemaVersion(n)},
	}
	for name, sts := range subscriber {
		for _, st := range sts {
			if !strings.Contains(st.SQL, schemaMark) {
				t.Errorf("the subscriber's %s does not name the schema as %q:\n%s", name, schemaMark, st.SQL)
			}
		}
	}
	// Set-up runs before the window, but must not look like the publisher.
	subscriber["CreateQueue"] = d.CreateQueue(q)
	subscriber["VersionTable"] = d.VersionTable(n)
	subscriber["SetSchemaVersion"] = []sqlqueue.Stmt{d.SetSchemaVersion(n, 1)}
	for _, m := range d.Migrations(n) {
		subscriber[fmt.Sprint("Migration ", m.Version)] = m.Stmts
	}
	for name, sts := range subscriber {
		for _, st := range sts {
			if strings.Contains(st.SQL, insertMark) || strings.Contains(st.SQL, lookupMark) {
				t.Errorf("the subscriber's %s would count as the publisher's:\n%s", name, st.SQL)
			}
		}
	}
}

func TestIsPermissionDenied(t *testing.T) {
	denied := mssql.Error{Number: 297, Message: "The user does not have permission to perform this action.",
		All: []mssql.Error{{Number: 300, Message: "VIEW SERVER STATE permission was denied on object 'server', database 'master'."}, {Number: 297}}}
	for _, err := range []error{
		mssql.Error{Number: 300},
		denied,
		fmt.Errorf("probe: %w", denied),
		mssql.Error{Number: 262, Message: "VIEW DATABASE STATE permission denied in database 'q'."},
	} {
		if !isPermissionDenied(err) {
			t.Errorf("isPermissionDenied(%v) = false", err)
		}
	}
	for _, err := range []error{mssql.Error{Number: 208}, errors.New("VIEW SERVER STATE permission was denied"), context.Canceled} {
		if isPermissionDenied(err) {
			t.Errorf("isPermissionDenied(%v) = true", err)
		}
	}
}

func TestParseTransactions(t *testing.T) {
	pad := func(s string) string { return s + strings.Repeat(" ", 128-len(s)) } // nchar(128)
	for _, tc := range []struct {
		name string
		rows []counterRow
		want txCounts
	}{
		{"both", []counterRow{{pad("Transactions/sec"), 1200}, {"Write Transactions/sec", 800}}, txCounts{1200, 800}},
		{"none", nil, txCounts{-1, -1}},
		{"one", []counterRow{{"Write Transactions/sec", 7}}, txCounts{-1, 7}},
		{"ambiguous", []counterRow{{"Transactions/sec", 1}, {"Transactions/sec", 2}, {"Write Transactions/sec", 3}}, txCounts{-1, 3}},
		{"others ignored", []counterRow{{"Log Flushes/sec", 9}, {"Transactions/sec", 4}}, txCounts{4, -1}},
	} {
		if got := parseTransactions(tc.rows); got != tc.want {
			t.Errorf("%s: parseTransactions = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := (txCounts{1500, 900}).since(txCounts{1200, -1}); got != (txCounts{300, -1}) {
		t.Errorf("since = %+v, want {300 -1}", got)
	}
}

func TestSumSessions(t *testing.T) {
	cpu, n := sumSessions([]sessionRow{{id: 51, cpu: 120, running: 0}, {id: 52, cpu: 30, running: 4}})
	if cpu != 154*time.Millisecond || n != 2 {
		t.Fatalf("sumSessions = %s over %d sessions, want 154ms over 2", cpu, n)
	}
	if cpu, n := sumSessions(nil); cpu != 0 || n != 0 {
		t.Fatalf("sumSessions(nil) = %s, %d", cpu, n)
	}
}

// Each configured database gets the scenario's configs of its own
// strategies: every one on PostgreSQL, Berth's on SQL Server.
func TestTargets(t *testing.T) {
	ts := targets(bench.Env{PostgresURL: "postgres://x", SQLServerURL: "sqlserver://y"})
	if len(ts) != 2 || ts[0].name != ServicePostgres || ts[1].name != ServiceSQLServer || ts[1].url != "sqlserver://y" {
		t.Fatalf("targets = %+v", ts)
	}
	if ts := targets(bench.Env{SQLServerURL: "sqlserver://y"}); len(ts) != 1 || ts[0].name != ServiceSQLServer {
		t.Fatalf("SQL Server alone: targets = %+v", ts)
	}
	rcs := DrainConfigs(0.01)
	if got := only(rcs, DrainStrategies); len(got) != len(rcs) {
		t.Fatalf("PostgreSQL runs %d of %d drain configs", len(got), len(rcs))
	}
	got := only(rcs, SQLServerStrategies)
	var insts []int
	for _, rc := range got {
		if rc.Strategy != StrategyBerth {
			t.Fatalf("SQL Server runs %q", rc.Strategy)
		}
		insts = append(insts, rc.Instances)
	}
	if !slices.Equal(insts, DrainInstances) {
		t.Fatalf("SQL Server drains with %v instances, want %v", insts, DrainInstances)
	}
	if _, err := RunDrain(context.Background(), bench.Env{Scale: 0.01}); err == nil || !strings.Contains(err.Error(), "SQL Server") {
		t.Fatalf("RunDrain without a database: %v", err)
	}
}

// The middle window measures what the sampler reports between the two
// marks, per message processed in between.
func TestMidWindow(t *testing.T) {
	tr := newTracker()
	sampled := make(chan struct{}, 2)
	var calls int // the window's goroutine alone calls sample
	sample := func() (time.Duration, error) {
		calls++
		defer func() { sampled <- struct{}{} }()
		return time.Duration(calls) * 10 * time.Millisecond, nil
	}
	w := startMidWindow(sample, func(a, b time.Duration) time.Duration { return a - b }, tr, 2, 4)
	now := time.Now()
	record := func(ids ...string) {
		for _, id := range ids {
			tr.record(message.NewMessage(id, nil), now)
		}
	}
	record("a", "b") // the low mark
	<-sampled
	record("c", "d") // the high mark
	<-sampled
	got, ok := w.result()
	if !ok || got != 5 {
		t.Fatalf("result = %v, %v; want 10 ms over 2 messages, 5 ms each", got, ok)
	}
	w.stop() // idempotent
}

// A SQL Server URL that cannot serve fails the scenario before any run,
// PostgreSQL's included when BERTH_TEST_POSTGRES_URL is set, and the error
// does not repeat the password.
func TestRunAllChecksTheSQLServerFirst(t *testing.T) {
	for name, u := range map[string]string{
		"berth parameter": "sqlserver://sa:secret@127.0.0.1:1?database=x&concurrency=8",
		"unreachable":     "sqlserver://sa:secret@127.0.0.1:1?database=x&dial+timeout=2",
	} {
		t.Run(name, func(t *testing.T) {
			var progressed []string
			env := bench.Env{PostgresURL: os.Getenv(testenv.EnvPostgresURL), SQLServerURL: u, Scale: 0.01, Progress: func(_ float64, status string) {
				progressed = append(progressed, status)
			}}
			rs, err := RunDrain(context.Background(), env)
			if err == nil || len(rs) != 0 || len(progressed) != 0 {
				t.Fatalf("RunDrain = %d results, %v, progress %q; want an error before any run", len(rs), err, progressed)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("the error repeats the password: %v", err)
			}
			t.Log(err)
		})
	}
}
