package sqlbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/microsoft/go-mssqldb/azuread"
	"github.com/microsoft/go-mssqldb/msdsn"

	"github.com/berth-go/berth/internal/sqlservertest"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlserver"
)

// SQLServerStrategies lists the strategies that run on SQL Server: Berth
// alone. watermill-sql v4 has no SQL Server adapter (PostgreSQL and MySQL
// only), and the peek baseline's count query is written for PostgreSQL.
var SQLServerStrategies = []string{StrategyBerth}

// SQLServerOnlyBerth is the remark on every SQL Server run.
const SQLServerOnlyBerth = "on SQL Server only berth runs: watermill-sql has no SQL Server adapter and the peek baseline is written for PostgreSQL"

// NoServerState is the remark when the login may not read the server's
// dynamic management views.
const NoServerState = "server CPU unavailable (VIEW SERVER STATE)"

// Application names (go-mssqldb's "app name", sys.dm_exec_sessions'
// program_name) of the harness's connections. A run's subscriber instances
// use appSubscribers + the run's schema, so that their sessions, and only
// theirs, can be found.
const (
	appAdmin       = "berth-sqlbench-admin"
	appPublisher   = "berth-sqlbench-publisher"
	appSubscribers = "berth-sqlbench-"
)

// sqlServerDSN returns go-mssqldb's DSN for the sqlserver:// URL rawURL,
// with its "app name" set to app (replacing the URL's). The URL may carry
// only go-mssqldb's own parameters (sqlserver.ConnParams): the benchmark
// configures the transport itself. Errors never repeat the URL, which may
// hold a password.
func sqlServerDSN(rawURL, app string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("sqlbench: the SQL Server URL does not parse: %w", err)
	}
	if u.Scheme != "sqlserver" {
		return "", fmt.Errorf("sqlbench: want a sqlserver:// URL, got scheme %q", u.Scheme)
	}
	q := u.Query()
	var other []string
	for k := range q {
		switch lk := strings.ToLower(k); {
		case lk == "app name":
			delete(q, k)
		case !slices.Contains(sqlserver.ConnParams, lk):
			other = append(other, k)
		}
	}
	if len(other) > 0 {
		sort.Strings(other)
		return "", fmt.Errorf("sqlbench: the SQL Server URL may carry only go-mssqldb's parameters (the benchmark configures Berth itself), not %s",
			strings.Join(other, ", "))
	}
	q.Set("app name", app)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// dialerFunc is a go-mssqldb Dialer.
type dialerFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// DialContext implements mssql.Dialer.
func (f dialerFunc) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}

// sqlServerConnector returns go-mssqldb's connector for dsn: through its
// azuread package when the DSN asks for Microsoft Entra ID authentication
// (a fedauth parameter), as transport/sqlserver opens it.
func sqlServerConnector(dsn string) (*mssql.Connector, error) {
	cfg, err := msdsn.Parse(dsn)
	if err != nil {
		return nil, err
	}
	if cfg.Parameters["fedauth"] == "" {
		return mssql.NewConnector(dsn)
	}
	return azuread.NewConnector(dsn)
}

// openSQLServerPool opens a database/sql pool over go-mssqldb of maxConns
// connections, kept open for the pool's life (a session's CPU time leaves
// sys.dm_exec_sessions with it). With ctr set, its TCP connections count
// their round trips (the SQL Browser's UDP lookup of a named instance does
// not).
func openSQLServerPool(dsn string, maxConns int, ctr *Counter) (*sql.DB, error) {
	c, err := sqlServerConnector(dsn)
	if err != nil {
		// go-mssqldb's parse errors never echo the password.
		return nil, fmt.Errorf("sqlbench: SQL Server DSN: %w", err)
	}
	if ctr != nil {
		base := &net.Dialer{KeepAlive: 30 * time.Second} // go-mssqldb's default
		counted := ctr.dial(base.DialContext)
		c.Dialer = dialerFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
			if strings.HasPrefix(network, "udp") {
				return base.DialContext(ctx, network, addr)
			}
			return counted(ctx, network, addr)
		})
	}
	db := sql.OpenDB(c)
	n := max(maxConns, 1)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return db, nil
}

// createSchemaSQL creates schema @p1, failing when it exists (every run's
// is fresh). CREATE SCHEMA must open its batch, hence sp_executesql; EXEC(…)
// would not take QUOTENAME.
const createSchemaSQL = `SET NOCOUNT ON;
DECLARE @sql nvarchar(max) = N'CREATE SCHEMA ' + QUOTENAME(@p1);
EXEC sp_executesql @sql;`

// statementCPUSQL sums the worker (CPU) time, in microseconds, of every
// cached statement whose batch text contains @p1 (the run's schema,
// quoted, with its dot) and neither @p2 nor @p3 (the publisher's
// statements). The patterns are arguments, so this query's own text never
// matches. Needs VIEW SERVER STATE (VIEW SERVER PERFORMANCE STATE from SQL
// Server 2022).
const statementCPUSQL = `SET NOCOUNT ON;
SELECT COALESCE(SUM(qs.total_worker_time), 0)
FROM sys.dm_exec_query_stats AS qs
CROSS APPLY sys.dm_exec_sql_text(qs.sql_handle) AS t
WHERE CHARINDEX(@p1, t.text) > 0 AND CHARINDEX(@p2, t.text) = 0 AND CHARINDEX(@p3, t.text) = 0;`

// sessionCPUSQL reads, for every session whose program_name is @p1, its CPU
// time (completed requests) and that of the request it is running, in
// milliseconds. Without VIEW SERVER STATE a login sees only its own
// session, so this finds none.
const sessionCPUSQL = `SET NOCOUNT ON;
SELECT s.session_id, s.cpu_time, COALESCE(SUM(r.cpu_time), 0)
FROM sys.dm_exec_sessions AS s
LEFT JOIN sys.dm_exec_requests AS r ON r.session_id = s.session_id
WHERE s.program_name = @p1
GROUP BY s.session_id, s.cpu_time;`

// transactionsSQL reads the current database's cumulative transaction
// counters. "Transactions/sec" and "Write Transactions/sec" are rate
// counters whose cntr_value is a running total: the difference of two
// readings is a count. The object is "SQLServer:Databases" on a default
// instance and "MSSQL$NAME:Databases" on a named one.
const transactionsSQL = `SET NOCOUNT ON;
SELECT RTRIM(counter_name), cntr_value
FROM sys.dm_os_performance_counters
WHERE object_name LIKE N'%:Databases' AND RTRIM(instance_name) = DB_NAME()
	AND RTRIM(counter_name) IN (N'Transactions/sec', N'Write Transactions/sec');`

// Counter names of transactionsSQL.
const (
	counterTransactions      = "Transactions/sec"
	counterWriteTransactions = "Write Transactions/sec"
)

// isPermissionDenied reports whether err is SQL Server refusing a
// permission: 300 (VIEW SERVER STATE … was denied), 297 (the user does not
// have permission) or 262 (permission denied in database, as Azure SQL
// Database reports VIEW DATABASE STATE).
func isPermissionDenied(err error) bool {
	var e mssql.Error
	if !errors.As(err, &e) {
		return false
	}
	for _, x := range append([]mssql.Error{e}, e.All...) {
		switch x.Number {
		case 262, 297, 300:
			return true
		}
	}
	return false
}

// sessionRow is one row of sessionCPUSQL.
type sessionRow struct {
	id      int
	cpu     int64 // ms, the session's completed requests
	running int64 // ms, the request it is running
}

// sumSessions returns the CPU time of rows and how many sessions they are.
func sumSessions(rows []sessionRow) (time.Duration, int) {
	var ms int64
	for _, r := range rows {
		ms += r.cpu + r.running
	}
	return time.Duration(ms) * time.Millisecond, len(rows)
}

// txCounts is one reading of transactionsSQL; a field is -1 when its
// counter was not found.
type txCounts struct{ all, write int64 }

// counterRow is one row of transactionsSQL.
type counterRow struct {
	name  string
	value int64
}

// parseTransactions picks the counters out of transactionsSQL's rows. A
// counter listed twice (the database name matched under two objects) is
// ambiguous and counts as not found.
func parseTransactions(rows []counterRow) txCounts {
	c := txCounts{all: -1, write: -1}
	seen := map[string]int{}
	for _, r := range rows {
		name := strings.TrimSpace(r.name)
		seen[name]++
		switch name {
		case counterTransactions:
			c.all = r.value
		case counterWriteTransactions:
			c.write = r.value
		}
	}
	if seen[counterTransactions] > 1 {
		c.all = -1
	}
	if seen[counterWriteTransactions] > 1 {
		c.write = -1
	}
	return c
}

// since returns the counts between before and c, -1 where either reading
// lacks the counter.
func (c txCounts) since(before txCounts) txCounts {
	d := txCounts{all: -1, write: -1}
	if c.all >= 0 && before.all >= 0 {
		d.all = c.all - before.all
	}
	if c.write >= 0 && before.write >= 0 {
		d.write = c.write - before.write
	}
	return d
}

// runMarkers returns what statementCPUSQL matches for a run in schema: the
// schema as the dialect quotes it in every table name, and the starts of
// the two statements only the publisher sends (its INSERT into the run's
// queue table and its lookup of the topic's subscriptions).
func runMarkers(schema string) (schemaMark, insertMark, lookupMark string) {
	d := sqlserver.Dialect{}
	t := sqlqueue.Tables{Schema: schema}
	q := sqlqueue.QueueFor(d, t, topic, "")
	n := sqlqueue.NamesFor(d, t)
	return d.QuoteIdent(schema) + ".", "INSERT INTO " + q.Table + " (", "SELECT queue_table FROM " + n.Subscriptions + " "
}

// sqlServerDB is a SQL Server and what the harness can read of it.
type sqlServerDB struct {
	url   string
	admin *sql.DB
	// dmv is whether the login may read the dynamic management views
	// (VIEW SERVER STATE): server CPU and transactions.
	dmv bool
	// tx is whether the database's transaction counters were found.
	tx      bool
	remarks []string
}

var _ database = (*sqlServerDB)(nil)

// openSQLServer connects to the server at the sqlserver:// URL rawURL and
// finds what it can measure there.
func openSQLServer(ctx context.Context, rawURL string) (*sqlServerDB, error) {
	dsn, err := sqlServerDSN(rawURL, appAdmin)
	if err != nil {
		return nil, err
	}
	admin, err := openSQLServerPool(dsn, 2, nil)
	if err != nil {
		return nil, err
	}
	if err := admin.PingContext(ctx); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("sqlbench: connect to SQL Server: %w", err)
	}
	s := &sqlServerDB{url: rawURL, admin: admin, remarks: []string{SQLServerOnlyBerth}}
	// Probe with a pattern no statement contains.
	_, err = s.statementCPU(ctx, [3]string{uniqueSchema("sqlbench_probe"), "-", "-"})
	switch {
	case err == nil:
		s.dmv = true
	case isPermissionDenied(err):
		s.remarks = append(s.remarks, NoServerState, "server transactions unavailable (VIEW SERVER STATE)")
	default:
		s.remarks = append(s.remarks, "server CPU unavailable: "+err.Error())
	}
	if s.dmv {
		c, err := s.transactions(ctx)
		switch {
		case err != nil:
			s.remarks = append(s.remarks, "server transactions unavailable: "+err.Error())
		case c.all < 0 && c.write < 0:
			s.remarks = append(s.remarks, "server transactions unavailable (no Transactions/sec counters for this database)")
		default:
			s.tx = true
		}
	}
	return s, nil
}

// statementCPU runs statementCPUSQL with marks.
func (s *sqlServerDB) statementCPU(ctx context.Context, marks [3]string) (time.Duration, error) {
	var us int64
	err := s.admin.QueryRowContext(ctx, statementCPUSQL, marks[0], marks[1], marks[2]).Scan(&us)
	return time.Duration(us) * time.Microsecond, err
}

// sessions runs sessionCPUSQL for app: the CPU time of its sessions and
// how many there are.
func (s *sqlServerDB) sessions(ctx context.Context, app string) (time.Duration, int, error) {
	rows, err := s.admin.QueryContext(ctx, sessionCPUSQL, app)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	var out []sessionRow
	for rows.Next() {
		var r sessionRow
		if err := rows.Scan(&r.id, &r.cpu, &r.running); err != nil {
			return 0, 0, err
		}
		out = append(out, r)
	}
	cpu, n := sumSessions(out)
	return cpu, n, rows.Err()
}

// transactions runs transactionsSQL.
func (s *sqlServerDB) transactions(ctx context.Context) (txCounts, error) {
	rows, err := s.admin.QueryContext(ctx, transactionsSQL)
	if err != nil {
		return txCounts{}, err
	}
	defer rows.Close()
	var out []counterRow
	for rows.Next() {
		var r counterRow
		if err := rows.Scan(&r.name, &r.value); err != nil {
			return txCounts{}, err
		}
		out = append(out, r)
	}
	return parseTransactions(out), rows.Err()
}

func (s *sqlServerDB) name() string           { return "sqlserver" }
func (s *sqlServerDB) resultDatabase() string { return "sqlserver" }
func (s *sqlServerDB) strategies() []string   { return SQLServerStrategies }
func (s *sqlServerDB) tracesStatements() bool { return false }
func (s *sqlServerDB) notes() []string        { return s.remarks }
func (s *sqlServerDB) close() error           { return s.admin.Close() }

func (s *sqlServerDB) newRun(ctx context.Context) (dbRun, error) {
	schema := uniqueSchema("sqlbench")
	if _, err := s.admin.ExecContext(ctx, createSchemaSQL, schema); err != nil {
		return nil, fmt.Errorf("sqlbench: create schema: %w", err)
	}
	r := &sqlServerRun{db: s, schema: schema}
	r.marks[0], r.marks[1], r.marks[2] = runMarkers(schema)
	return r, nil
}

// sqlServerRun is one run's schema on SQL Server and its measurements.
type sqlServerRun struct {
	db     *sqlServerDB
	schema string
	marks  [3]string // statementCPUSQL's arguments

	cpuBefore time.Duration
	txBefore  txCounts
	// The instances' sessions at the last ack: their CPU time, how many.
	subsCPU time.Duration
	subsN   int
}

func (r *sqlServerRun) strategy(name string) (strategy, error) {
	if name != StrategyBerth {
		return strategy{}, fmt.Errorf("sqlbench: strategy %q does not run on SQL Server", name)
	}
	return sqlServerBerthStrategy(r.schema), nil
}

func (r *sqlServerRun) dsn(app string) string {
	dsn, _ := sqlServerDSN(r.db.url, app) // the URL parsed when the database opened
	return dsn
}

func (r *sqlServerRun) publisherPool() (*sql.DB, error) {
	return openSQLServerPool(r.dsn(appPublisher), 4, nil)
}

func (r *sqlServerRun) instancePool(maxConns int, ctr *Counter) (*sql.DB, error) {
	return openSQLServerPool(r.dsn(appSubscribers+r.schema), maxConns, ctr)
}

func (r *sqlServerRun) begin(ctx context.Context) error {
	if !r.db.dmv {
		return nil
	}
	var err error
	if r.cpuBefore, err = r.db.statementCPU(ctx, r.marks); err != nil {
		return fmt.Errorf("sqlbench: read sys.dm_exec_query_stats: %w", err)
	}
	if r.db.tx {
		if r.txBefore, err = r.db.transactions(ctx); err != nil {
			return fmt.Errorf("sqlbench: read sys.dm_os_performance_counters: %w", err)
		}
	}
	return nil
}

func (r *sqlServerRun) midWindow(ctx context.Context, tr *tracker, lo, hi int) *midWindow {
	if !r.db.dmv {
		return nil
	}
	sample := func() (time.Duration, error) { return r.db.statementCPU(ctx, r.marks) }
	since := func(after, before time.Duration) time.Duration { return after - before }
	return startMidWindow(sample, since, tr, lo, hi)
}

// lastAck reads the instances' sessions while they are open: a closed
// session leaves sys.dm_exec_sessions.
func (r *sqlServerRun) lastAck(ctx context.Context) error {
	if !r.db.dmv {
		return nil
	}
	var err error
	if r.subsCPU, r.subsN, err = r.db.sessions(ctx, appSubscribers+r.schema); err != nil {
		return fmt.Errorf("sqlbench: read sys.dm_exec_sessions: %w", err)
	}
	return nil
}

func (r *sqlServerRun) end(ctx context.Context, m map[string]float64, per func(float64) float64) ([]string, error) {
	if !r.db.dmv {
		return nil, nil
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	after, err := r.db.statementCPU(ctx, r.marks)
	if err != nil {
		return nil, fmt.Errorf("sqlbench: read sys.dm_exec_query_stats: %w", err)
	}
	m["db_cpu_ms_per_msg"] = per(ms(after - r.cpuBefore))
	m["db_session_cpu_ms_per_msg"] = per(ms(r.subsCPU))
	notes := []string{fmt.Sprintf("subscriber sessions at the last ack: %d", r.subsN)}
	if r.db.tx {
		now, err := r.db.transactions(ctx)
		if err != nil {
			return nil, fmt.Errorf("sqlbench: read sys.dm_os_performance_counters: %w", err)
		}
		d := now.since(r.txBefore)
		if d.all >= 0 {
			m["db_tx_per_msg"] = per(float64(d.all))
		}
		if d.write >= 0 {
			m["db_write_tx_per_msg"] = per(float64(d.write))
		}
	}
	return notes, nil
}

// drop drops the schema's tables and the schema, and checks it is gone.
func (r *sqlServerRun) drop(ctx context.Context) error {
	return sqlservertest.DropSchema(ctx, r.db.admin, r.schema)
}
