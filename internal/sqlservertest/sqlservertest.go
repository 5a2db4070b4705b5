// Package sqlservertest holds what tests and benchmarks need on a live SQL
// Server: dropping the schema a run made. It imports no testing package,
// so the benchmark harness in the berth binary can use it.
package sqlservertest

import (
	"context"
	"database/sql"
	"fmt"
)

// DropSchemaSQL drops every table of schema @p1, then the schema
// (SQL Server has no DROP SCHEMA … CASCADE). One table per loop: EXEC(…)
// takes only literals and variables, and SELECT @v += … over several rows
// is undefined, so each statement is built in a variable and run with
// sp_executesql. It parses on SQL Server and ran on Babelfish 4.3.
const DropSchemaSQL = `SET NOCOUNT ON;
DECLARE @s sysname = @p1, @sql nvarchar(max);
WHILE 1 = 1
BEGIN
	SET @sql = NULL;
	SELECT TOP (1) @sql = N'DROP TABLE ' + QUOTENAME(s.name) + N'.' + QUOTENAME(t.name)
	FROM sys.tables AS t INNER JOIN sys.schemas AS s ON s.schema_id = t.schema_id
	WHERE s.name = @s
	ORDER BY t.object_id;
	IF @sql IS NULL BREAK;
	EXEC sp_executesql @sql;
END;
IF SCHEMA_ID(@s) IS NOT NULL
BEGIN
	SET @sql = N'DROP SCHEMA ' + QUOTENAME(@s);
	EXEC sp_executesql @sql;
END;`

// DropSchema drops schema and its tables on a SQL Server (the
// contract tests' and the benchmarks' cleanup), and checks it is gone.
func DropSchema(ctx context.Context, db *sql.DB, schema string) error {
	if _, err := db.ExecContext(ctx, DropSchemaSQL, schema); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	var left int
	if err := db.QueryRowContext(ctx, `SET NOCOUNT ON;
SELECT COUNT(*) FROM sys.schemas WHERE name = @p1;`, schema).Scan(&left); err != nil {
		return fmt.Errorf("drop schema %s: check: %w", schema, err)
	}
	if left != 0 {
		return fmt.Errorf("drop schema %s: the schema is still there", schema)
	}
	return nil
}
