// Package testenv locates the external services that Berth's integration
// tests run against and gives each test an isolated corner of them.
//
// It is test infrastructure: only _test.go files import it.
//
// # Finding services
//
// Services are found through environment variables, which `make test`
// (scripts/test.sh) sets after starting or finding each service:
//
//   - BERTH_TEST_POSTGRES_URL: a PostgreSQL connection URL, for example
//     postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//   - BERTH_TEST_SQS_ENDPOINT: an SQS-compatible endpoint, for example the
//     fauxqs emulator at http://127.0.0.1:4566
//   - BERTH_TEST_SQLSERVER_URL: a SQL Server URL, for example
//     sqlserver://sa:secret@127.0.0.1:1433?database=test
//
// A developer can also run `make services-up` once and then
// `source .cache/test.env` to run `go test` by hand.
//
// # Missing services
//
// When a variable is unset the helper calls t.Skip with a message saying how
// to get the service, so `go test ./...` on a laptop without services still
// passes. Under CI=true a missing PostgreSQL or SQS endpoint is a failure
// (t.Fatal) instead: CI must never pass by skipping. SQL Server is the
// exception: it cannot run on the CI machines, so [SQLServerURL] skips even
// under CI.
//
// In -short mode (`make test-short`) every helper skips, whatever the
// environment: integration tests are not short.
//
// # Isolation
//
// Tests must not share state. [PostgresSchemaURL] creates a fresh schema per
// call and returns a URL whose connections use it as their search_path; the
// schema is dropped with CASCADE when the test ends. [UniqueName] makes short
// unique names for queues and tables.
package testenv
