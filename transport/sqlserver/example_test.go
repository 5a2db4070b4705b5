package sqlserver_test

import (
	"context"
	"fmt"
	"log"
	"net/url"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlserver"
)

// A sqlserver:// URL carries go-mssqldb's connection parameters and
// Berth's side by side; Berth's are taken out before the DSN reaches the
// driver.
func ExampleParseSubscriberURL() {
	u, _ := url.Parse("sqlserver://app:secret@db:1433?database=queues&encrypt=true&concurrency=32&consumer_group=billing&lease=1m")
	cfg, err := sqlserver.ParseSubscriberURL(u)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.DSN)
	fmt.Println(cfg.Pipeline.Concurrency, cfg.ConsumerGroup, cfg.Lease)
	// Output:
	// sqlserver://app:secret@db:1433?database=queues&encrypt=true
	// 32 billing 1m0s
}

// Subscribing through the URL registry: importing the package registers
// the sqlserver:// scheme.
func ExampleNewSubscriber() {
	cfg := sqlserver.SubscriberConfig{DSN: "sqlserver://app:secret@db:1433?database=queues"}
	cfg.ConsumerGroup = "billing"
	cfg.Pipeline.Concurrency = 32
	sub, err := sqlserver.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()

	// The same subscriber, from a URL:
	//   transport.OpenSubscriber(ctx, "sqlserver://app:secret@db:1433?database=queues&consumer_group=billing&concurrency=32")
	_ = transport.OpenSubscriber
	_ = context.Background
}

// The DDL for DBAs who apply schema by hand (then set
// Tables.ManualSchema, URL manual_schema=true).
func ExampleDDL() {
	fmt.Print(sqlserver.DDL(sqlqueue.Tables{Schema: "app"}, sqlqueue.QueueRef{Topic: "orders"}))
	// Output:
	// -- Berth SQL queue schema (sqlserver dialect); GO ends each batch (sqlcmd, SSMS)
	//
	// SET ANSI_NULLS, ANSI_PADDING, ANSI_WARNINGS, ARITHABORT, CONCAT_NULL_YIELDS_NULL, QUOTED_IDENTIFIER ON;
	// SET NUMERIC_ROUNDABORT OFF;
	// GO
	//
	// SET NOCOUNT ON;
	// IF SCHEMA_ID(N'app') IS NULL
	// 	EXEC(N'CREATE SCHEMA [app]')
	// GO
	//
	// SET NOCOUNT ON;
	// IF OBJECT_ID(N'[app].[berth_schema_version]', N'U') IS NULL
	// CREATE TABLE [app].[berth_schema_version] (
	// 	version    int          NOT NULL PRIMARY KEY,
	// 	applied_at datetime2(3) NOT NULL DEFAULT SYSUTCDATETIME()
	// )
	// GO
	//
	// -- version 1
	// SET NOCOUNT ON;
	// IF OBJECT_ID(N'[app].[berth_subscriptions]', N'U') IS NULL
	// CREATE TABLE [app].[berth_subscriptions] (
	// 	topic          nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
	// 	consumer_group nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
	// 	queue_table    nvarchar(128) NOT NULL,
	// 	created_at     datetime2(3)  NOT NULL DEFAULT SYSUTCDATETIME(),
	// 	PRIMARY KEY (topic, consumer_group)
	// )
	// GO
	//
	// SET NOCOUNT ON;
	// IF OBJECT_ID(N'[app].[berth_errors]', N'U') IS NULL
	// CREATE TABLE [app].[berth_errors] (
	// 	id           bigint IDENTITY(1, 1) NOT NULL PRIMARY KEY,
	// 	queue_table  nvarchar(128)  NOT NULL,
	// 	message_uuid nvarchar(255)  NOT NULL,
	// 	headers      nvarchar(max)  NOT NULL,
	// 	body         varbinary(max) NOT NULL,
	// 	attempts     int            NOT NULL,
	// 	reason       nvarchar(max)  NOT NULL,
	// 	original_id  bigint         NOT NULL,
	// 	created_at   datetime2(3)   NOT NULL,
	// 	failed_at    datetime2(3)   NOT NULL DEFAULT SYSUTCDATETIME()
	// )
	// GO
	//
	// SET NOCOUNT ON;
	// IF INDEXPROPERTY(OBJECT_ID(N'[app].[berth_errors]'), N'berth_errors_queue', 'IndexID') IS NULL
	// CREATE INDEX [berth_errors_queue] ON [app].[berth_errors] (queue_table, failed_at)
	// GO
	//
	// -- version 2
	// SET NOCOUNT ON;
	// SET LOCK_TIMEOUT 5000;
	// DECLARE @name nvarchar(128), @t nvarchar(300), @sql nvarchar(max), @online nvarchar(200);
	// DECLARE @done TABLE (name nvarchar(128) NOT NULL PRIMARY KEY);
	// WHILE 1 = 1
	// BEGIN
	// 	SET @name = NULL;
	// 	SELECT TOP (1) @name = s.queue_table FROM [app].[berth_subscriptions] AS s
	// 	WHERE NOT EXISTS (SELECT 1 FROM @done AS d WHERE d.name = s.queue_table)
	// 	ORDER BY s.queue_table;
	// 	IF @name IS NULL BREAK;
	// 	INSERT INTO @done (name) VALUES (@name);
	// 	SET @t = N'[app].' + QUOTENAME(@name);
	// IF OBJECT_ID(@t, N'U') IS NOT NULL
	// BEGIN
	// 	SET @online = CASE WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
	// 			OR CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 AND CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 16
	// 		THEN N'ONLINE = ON (WAIT_AT_LOW_PRIORITY (MAX_DURATION = 1 MINUTES, ABORT_AFTER_WAIT = SELF))'
	// 		WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 THEN N'ONLINE = ON' END;
	// 	IF COL_LENGTH(@t, N'ordering_key') IS NULL
	// 	BEGIN
	// 		SET @sql = N'ALTER TABLE ' + @t + N' ADD ordering_key nvarchar(255) COLLATE Latin1_General_100_BIN2 NULL';
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(@t) AND lock_escalation <> 1)
	// 	BEGIN
	// 		SET @sql = N'ALTER TABLE ' + @t + N' SET (LOCK_ESCALATION = DISABLE)';
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
	// 		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
	// 		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') AND c.name = N'ordering_key')
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_pending') + N' ON ' + @t + N' (due_at, id) INCLUDE (expires_at, ordering_key) WHERE state = 0'
	// 			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') IS NULL THEN N''
	// 				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_key', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_key') + N' ON ' + @t + N' (ordering_key, id) WHERE ordering_key IS NOT NULL'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_inflight', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_inflight') + N' ON ' + @t + N' (ordering_key) WHERE ordering_key IS NOT NULL AND state > 0'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_expiry', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_expiry') + N' ON ' + @t + N' (expires_at) WHERE state = 0 AND expires_at IS NOT NULL'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
	// 		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
	// 		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') AND c.name = N'state')
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_leased') + N' ON ' + @t + N' (lease_until) INCLUDE (attempts, state) WHERE state > 0'
	// 			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') IS NULL THEN N''
	// 				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 15 OR CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
	// 	BEGIN
	// 		SET @sql = N'IF EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(@t) AND index_id > 0 AND optimize_for_sequential_key = 0)
	// 	ALTER INDEX ALL ON ' + @t + N' SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)';
	// 		EXEC sp_executesql @sql, N'@t nvarchar(300)', @t = @t;
	// 	END;
	// END;
	// END;
	// GO
	//
	// -- version 3
	// SET NOCOUNT ON;
	// SET LOCK_TIMEOUT 5000;
	// DECLARE @name nvarchar(128), @t nvarchar(300), @sql nvarchar(max), @online nvarchar(200);
	// DECLARE @done TABLE (name nvarchar(128) NOT NULL PRIMARY KEY);
	// WHILE 1 = 1
	// BEGIN
	// 	SET @name = NULL;
	// 	SELECT TOP (1) @name = s.queue_table FROM [app].[berth_subscriptions] AS s
	// 	WHERE NOT EXISTS (SELECT 1 FROM @done AS d WHERE d.name = s.queue_table)
	// 	ORDER BY s.queue_table;
	// 	IF @name IS NULL BREAK;
	// 	INSERT INTO @done (name) VALUES (@name);
	// 	SET @t = N'[app].' + QUOTENAME(@name);
	// IF OBJECT_ID(@t, N'U') IS NOT NULL
	// BEGIN
	// 	SET @online = CASE WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
	// 			OR CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 AND CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 16
	// 		THEN N'ONLINE = ON (WAIT_AT_LOW_PRIORITY (MAX_DURATION = 1 MINUTES, ABORT_AFTER_WAIT = SELF))'
	// 		WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 THEN N'ONLINE = ON' END;
	// 	IF COL_LENGTH(@t, N'ordering_key') IS NULL
	// 	BEGIN
	// 		SET @sql = N'ALTER TABLE ' + @t + N' ADD ordering_key nvarchar(255) COLLATE Latin1_General_100_BIN2 NULL';
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(@t) AND lock_escalation <> 1)
	// 	BEGIN
	// 		SET @sql = N'ALTER TABLE ' + @t + N' SET (LOCK_ESCALATION = DISABLE)';
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
	// 		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
	// 		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') AND c.name = N'ordering_key')
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_pending') + N' ON ' + @t + N' (due_at, id) INCLUDE (expires_at, ordering_key) WHERE state = 0'
	// 			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') IS NULL THEN N''
	// 				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_key', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_key') + N' ON ' + @t + N' (ordering_key, id) WHERE ordering_key IS NOT NULL'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_inflight', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_inflight') + N' ON ' + @t + N' (ordering_key) WHERE ordering_key IS NOT NULL AND state > 0'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_expiry', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_expiry') + N' ON ' + @t + N' (expires_at) WHERE state = 0 AND expires_at IS NOT NULL'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
	// 		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
	// 		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') AND c.name = N'state')
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_leased') + N' ON ' + @t + N' (lease_until) INCLUDE (attempts, state) WHERE state > 0'
	// 			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') IS NULL THEN N''
	// 				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 15 OR CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
	// 	BEGIN
	// 		SET @sql = N'IF EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(@t) AND index_id > 0 AND optimize_for_sequential_key = 0)
	// 	ALTER INDEX ALL ON ' + @t + N' SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)';
	// 		EXEC sp_executesql @sql, N'@t nvarchar(300)', @t = @t;
	// 	END;
	// END;
	// END;
	// GO
	//
	// -- version 4
	// SET NOCOUNT ON;
	// SET LOCK_TIMEOUT 5000;
	// DECLARE @name nvarchar(128), @t nvarchar(300), @sql nvarchar(max), @online nvarchar(200);
	// DECLARE @done TABLE (name nvarchar(128) NOT NULL PRIMARY KEY);
	// WHILE 1 = 1
	// BEGIN
	// 	SET @name = NULL;
	// 	SELECT TOP (1) @name = s.queue_table FROM [app].[berth_subscriptions] AS s
	// 	WHERE NOT EXISTS (SELECT 1 FROM @done AS d WHERE d.name = s.queue_table)
	// 	ORDER BY s.queue_table;
	// 	IF @name IS NULL BREAK;
	// 	INSERT INTO @done (name) VALUES (@name);
	// 	SET @t = N'[app].' + QUOTENAME(@name);
	// IF OBJECT_ID(@t, N'U') IS NOT NULL
	// BEGIN
	// 	SET @online = CASE WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
	// 			OR CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 AND CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 16
	// 		THEN N'ONLINE = ON (WAIT_AT_LOW_PRIORITY (MAX_DURATION = 1 MINUTES, ABORT_AFTER_WAIT = SELF))'
	// 		WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 THEN N'ONLINE = ON' END;
	// 	IF COL_LENGTH(@t, N'ordering_key') IS NULL
	// 	BEGIN
	// 		SET @sql = N'ALTER TABLE ' + @t + N' ADD ordering_key nvarchar(255) COLLATE Latin1_General_100_BIN2 NULL';
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(@t) AND lock_escalation <> 1)
	// 	BEGIN
	// 		SET @sql = N'ALTER TABLE ' + @t + N' SET (LOCK_ESCALATION = DISABLE)';
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
	// 		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
	// 		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') AND c.name = N'ordering_key')
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_pending') + N' ON ' + @t + N' (due_at, id) INCLUDE (expires_at, ordering_key) WHERE state = 0'
	// 			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') IS NULL THEN N''
	// 				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_key', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_key') + N' ON ' + @t + N' (ordering_key, id) WHERE ordering_key IS NOT NULL'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_inflight', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_inflight') + N' ON ' + @t + N' (ordering_key) WHERE ordering_key IS NOT NULL AND state > 0'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_expiry', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_expiry') + N' ON ' + @t + N' (expires_at) WHERE state = 0 AND expires_at IS NOT NULL'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
	// 		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
	// 		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') AND c.name = N'state')
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_leased') + N' ON ' + @t + N' (lease_until) INCLUDE (attempts, state) WHERE state > 0'
	// 			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') IS NULL THEN N''
	// 				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 15 OR CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
	// 	BEGIN
	// 		SET @sql = N'IF EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(@t) AND index_id > 0 AND optimize_for_sequential_key = 0)
	// 	ALTER INDEX ALL ON ' + @t + N' SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)';
	// 		EXEC sp_executesql @sql, N'@t nvarchar(300)', @t = @t;
	// 	END;
	// END;
	// END;
	// GO
	//
	// SET NOCOUNT ON;
	// IF NOT EXISTS (SELECT 1 FROM [app].[berth_schema_version] WHERE version = 4)
	// INSERT INTO [app].[berth_schema_version] (version) VALUES (4)
	// GO
	//
	// -- queue of topic "orders", consumer group ""
	// SET NOCOUNT ON;
	// SET LOCK_TIMEOUT 5000;
	// IF OBJECT_ID(N'[app].[berth_q_orders]', N'U') IS NULL
	// BEGIN
	// CREATE TABLE [app].[berth_q_orders] (
	// 	id          bigint IDENTITY(1, 1) NOT NULL PRIMARY KEY CLUSTERED,
	// 	uuid        nvarchar(255)  NOT NULL,
	// 	headers     nvarchar(max)  NOT NULL,
	// 	body        varbinary(max) NOT NULL,
	// 	state       tinyint        NOT NULL DEFAULT 0,
	// 	owner       bigint         NULL,
	// 	attempts    int            NOT NULL DEFAULT 0,
	// 	created_at  datetime2(3)   NOT NULL DEFAULT SYSUTCDATETIME(),
	// 	due_at      datetime2(3)   NOT NULL DEFAULT SYSUTCDATETIME(),
	// 	lease_until datetime2(3)   NULL,
	// 	expires_at  datetime2(3)   NULL,
	// 	ordering_key nvarchar(255) COLLATE Latin1_General_100_BIN2 NULL
	// );
	// ALTER TABLE [app].[berth_q_orders] SET (LOCK_ESCALATION = DISABLE);
	// END
	// GO
	//
	// SET NOCOUNT ON;
	// SET LOCK_TIMEOUT 5000;
	// IF INDEXPROPERTY(OBJECT_ID(N'[app].[berth_q_orders]'), N'berth_q_orders_pending', 'IndexID') IS NULL
	// CREATE INDEX [berth_q_orders_pending] ON [app].[berth_q_orders] (due_at, id) INCLUDE (expires_at, ordering_key) WHERE state = 0
	// GO
	//
	// SET NOCOUNT ON;
	// SET LOCK_TIMEOUT 5000;
	// IF INDEXPROPERTY(OBJECT_ID(N'[app].[berth_q_orders]'), N'berth_q_orders_leased', 'IndexID') IS NULL
	// CREATE INDEX [berth_q_orders_leased] ON [app].[berth_q_orders] (lease_until) INCLUDE (attempts, state) WHERE state > 0
	// GO
	//
	// SET NOCOUNT ON;
	// SET LOCK_TIMEOUT 5000;
	// DECLARE @name nvarchar(128) = N'berth_q_orders', @t nvarchar(300) = N'[app].[berth_q_orders]', @sql nvarchar(max), @online nvarchar(200);
	// IF OBJECT_ID(@t, N'U') IS NOT NULL
	// BEGIN
	// 	SET @online = CASE WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
	// 			OR CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 AND CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 16
	// 		THEN N'ONLINE = ON (WAIT_AT_LOW_PRIORITY (MAX_DURATION = 1 MINUTES, ABORT_AFTER_WAIT = SELF))'
	// 		WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 THEN N'ONLINE = ON' END;
	// 	IF COL_LENGTH(@t, N'ordering_key') IS NULL
	// 	BEGIN
	// 		SET @sql = N'ALTER TABLE ' + @t + N' ADD ordering_key nvarchar(255) COLLATE Latin1_General_100_BIN2 NULL';
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(@t) AND lock_escalation <> 1)
	// 	BEGIN
	// 		SET @sql = N'ALTER TABLE ' + @t + N' SET (LOCK_ESCALATION = DISABLE)';
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
	// 		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
	// 		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') AND c.name = N'ordering_key')
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_pending') + N' ON ' + @t + N' (due_at, id) INCLUDE (expires_at, ordering_key) WHERE state = 0'
	// 			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') IS NULL THEN N''
	// 				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_key', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_key') + N' ON ' + @t + N' (ordering_key, id) WHERE ordering_key IS NOT NULL'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_inflight', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_inflight') + N' ON ' + @t + N' (ordering_key) WHERE ordering_key IS NOT NULL AND state > 0'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_expiry', 'IndexID') IS NULL
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_expiry') + N' ON ' + @t + N' (expires_at) WHERE state = 0 AND expires_at IS NOT NULL'
	// 			+ COALESCE(N' WITH (' + @online + N')', N'');
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
	// 		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
	// 		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') AND c.name = N'state')
	// 	BEGIN
	// 		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_leased') + N' ON ' + @t + N' (lease_until) INCLUDE (attempts, state) WHERE state > 0'
	// 			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') IS NULL THEN N''
	// 				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
	// 		EXEC sp_executesql @sql;
	// 	END;
	// 	IF CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 15 OR CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
	// 	BEGIN
	// 		SET @sql = N'IF EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(@t) AND index_id > 0 AND optimize_for_sequential_key = 0)
	// 	ALTER INDEX ALL ON ' + @t + N' SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)';
	// 		EXEC sp_executesql @sql, N'@t nvarchar(300)', @t = @t;
	// 	END;
	// END;
	//
	// GO
}
