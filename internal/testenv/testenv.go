package testenv

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Environment variables read by this package.
const (
	// EnvPostgresURL names the variable holding the PostgreSQL URL.
	EnvPostgresURL = "BERTH_TEST_POSTGRES_URL"
	// EnvSQSEndpoint names the variable holding the SQS endpoint URL.
	EnvSQSEndpoint = "BERTH_TEST_SQS_ENDPOINT"
	// EnvSQLServerURL names the variable holding the SQL Server URL.
	EnvSQLServerURL = "BERTH_TEST_SQLSERVER_URL"
	// EnvCI names the variable that, when true, turns a missing service
	// into a test failure.
	EnvCI = "CI"
)

// Static credentials and region for the SQS emulator. The emulator accepts
// any credentials; tests pass these to the AWS SDK as static credentials.
const (
	// SQSAccessKeyID is the access key tests use against the emulator.
	SQSAccessKeyID = "test"
	// SQSSecretAccessKey is the secret key tests use against the emulator.
	SQSSecretAccessKey = "test"
	// DefaultSQSRegion is the region used when AWS_REGION is unset.
	DefaultSQSRegion = "us-east-1"
)

// MaxNameLen is the longest name [UniqueName] returns. It leaves room under
// PostgreSQL's 63-byte identifier limit and SQS's 80-character queue name
// limit for a suffix such as "_dlq" or ".fifo".
const MaxNameLen = 48

// cleanupTimeout bounds the helper's own database work at cleanup.
const cleanupTimeout = 30 * time.Second

// InCI reports whether the tests run under CI (CI=true), where a missing
// service is a failure rather than a skip.
func InCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv(EnvCI))
	return ci
}

// require returns the value of the environment variable env. When it is
// unset it skips the test with a message saying how to get the service, or,
// under CI and when mandatory is true, fails it. In -short mode it always
// skips: integration tests are not short.
func require(t testing.TB, env, service, how string, mandatory bool) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("testenv: skipping integration test (needs %s) in -short mode", service)
	}
	if v := strings.TrimSpace(os.Getenv(env)); v != "" {
		return v
	}
	if mandatory && InCI() {
		t.Fatalf("testenv: %s is required under CI=true but %s is unset (run the tests with `make test`, which starts it)", service, env)
	}
	t.Skipf("testenv: skipping, %s is unavailable: %s is unset; %s", service, env, how)
	return ""
}

// PostgresURL returns the URL of the test PostgreSQL database from
// BERTH_TEST_POSTGRES_URL. When it is unset the test is skipped, or fails
// under CI=true.
//
// Prefer [PostgresSchemaURL], which isolates the test in its own schema.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return require(t, EnvPostgresURL, "PostgreSQL", "run `make test`, or `make services-up && source .cache/test.env`, or set it to e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable", true)
}

// PostgresSchemaURL creates a fresh, uniquely named schema in the test
// database and returns a URL whose connections use it as their search_path,
// so unqualified table names resolve there. The schema is dropped with
// CASCADE when the test and its subtests finish. It skips or fails like
// [PostgresURL].
//
// The URL works with pgx (pgx.Connect, pgxpool, and database/sql through
// pgx's stdlib driver), which sends search_path as a run-time parameter when
// connecting.
func PostgresSchemaURL(t testing.TB) string {
	t.Helper()
	u, _ := PostgresSchema(t)
	return u
}

// SQLDatabases are the databases a test of a program on Berth's SQL
// transports runs on here, by name, for [SQLURL].
var SQLDatabases = []string{"postgres", "sqlite"}

// SQLURL returns the Berth URL of an empty database of its own for t on
// database (one of [SQLDatabases]): on "postgres" a schema of its own
// ([PostgresSchemaURL]), on "sqlite" a file in t's temporary directory.
func SQLURL(t testing.TB, database string) string {
	t.Helper()
	switch database {
	case "postgres":
		return PostgresSchemaURL(t)
	case "sqlite":
		return "sqlite://" + filepath.Join(t.TempDir(), "berth.db")
	}
	t.Fatalf("testenv: no SQL database %q (want one of %v)", database, SQLDatabases)
	return ""
}

// PostgresSchema is [PostgresSchemaURL] that also returns the schema's name,
// for tests that qualify names or inspect the catalog.
func PostgresSchema(t testing.TB) (schemaURL, schema string) {
	t.Helper()
	base := PostgresURL(t)
	schema = UniqueName("t")

	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := execOnce(ctx, base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testenv: create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		// A lock timeout turns a connection the test leaked inside an open
		// transaction into a clear error instead of a hang.
		err := execOnce(ctx, base,
			"SET lock_timeout = '10s'",
			"DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		if err != nil {
			t.Errorf("testenv: drop schema %s (did the test leave a transaction open?): %v", schema, err)
		}
	})

	schemaURL, err := WithSearchPath(base, schema)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return schemaURL, schema
}

// WithSearchPath returns the PostgreSQL connection string connString with its
// search_path run-time parameter set to schema. It accepts both URL
// (postgres://…) and keyword/value (host=… dbname=…) forms.
func WithSearchPath(connString, schema string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("parse postgres url: %w", err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// Keyword/value form: a later keyword overrides an earlier one.
	return strings.TrimSpace(connString) + " search_path='" + strings.ReplaceAll(schema, "'", `\'`) + "'", nil
}

// execOnce runs statements on one short-lived connection.
func execOnce(ctx context.Context, connString string, statements ...string) error {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range statements {
		if _, err := conn.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// SQS describes the SQS endpoint tests run against.
type SQS struct {
	// Endpoint is the base URL of the SQS API, e.g. http://127.0.0.1:4566.
	Endpoint string
	// Region is AWS_REGION, or DefaultSQSRegion when that is unset.
	Region string
	// AccessKeyID and SecretAccessKey are static credentials for the
	// emulator (SQSAccessKeyID and SQSSecretAccessKey).
	AccessKeyID, SecretAccessKey string
}

// SQSEndpoint returns the SQS endpoint URL from BERTH_TEST_SQS_ENDPOINT. When
// it is unset the test is skipped, or fails under CI=true.
func SQSEndpoint(t testing.TB) string {
	t.Helper()
	return require(t, EnvSQSEndpoint, "the SQS emulator", "run `make test`, or `make services-up && source .cache/test.env`, which start the fauxqs emulator (npm package fauxqs@1.9.2)", true)
}

// SQSConfig returns the SQS endpoint with the region and static credentials
// to use against it. It skips or fails like [SQSEndpoint]. It does not touch
// the process environment, so it is safe in parallel tests; pass the
// credentials to the AWS SDK explicitly.
func SQSConfig(t testing.TB) SQS {
	t.Helper()
	endpoint := SQSEndpoint(t)
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = DefaultSQSRegion
	}
	return SQS{
		Endpoint:        endpoint,
		Region:          region,
		AccessKeyID:     SQSAccessKeyID,
		SecretAccessKey: SQSSecretAccessKey,
	}
}

// SQLServerURL returns the SQL Server URL from BERTH_TEST_SQLSERVER_URL. When
// it is unset the test is skipped, even under CI=true: SQL Server cannot run
// on the CI machines.
func SQLServerURL(t testing.TB) string {
	t.Helper()
	return require(t, EnvSQLServerURL, "SQL Server", "point it at a SQL Server 2019+ instance, e.g. sqlserver://sa:secret@127.0.0.1:1433?database=test (SQL Server is not started by `make test`)", false)
}

// nameEncoding is lowercase base32 without padding: [a-z2-7].
var nameEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// UniqueName returns a short name unique across tests and processes, made of
// prefix, an underscore and 13 random characters, for example
// "orders_k3j5x2b7qa4mz". The result matches ^[a-z][a-z0-9_]*$ and is at most
// MaxNameLen characters, so it is valid unquoted as a PostgreSQL, SQLite or
// SQL Server identifier and as a standard or (with ".fifo" appended) FIFO SQS
// queue name. The prefix is lowercased, characters other than [a-z0-9_] become
// underscores, and it is shortened to fit; an empty prefix or one starting
// with a digit gets a leading "t".
func UniqueName(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error.
	suffix := nameEncoding.EncodeToString(b[:])

	p := []byte(strings.ToLower(prefix))
	for i, c := range p {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			p[i] = '_'
		}
	}
	if len(p) == 0 || (p[0] >= '0' && p[0] <= '9') || p[0] == '_' {
		p = append([]byte("t"), p...)
	}
	if max := MaxNameLen - 1 - len(suffix); len(p) > max {
		p = p[:max]
	}
	return string(p) + "_" + suffix
}
