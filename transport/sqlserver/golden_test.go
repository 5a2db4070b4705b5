package sqlserver

// Golden T-SQL: the exact text of every statement the dialect writes, for
// the tables of Tables{Schema: "app"} and the queue of topic "orders",
// consumer group "billing". A change to any statement must change its
// golden here, deliberately, and be reviewed against the notes in
// docs/transports/sqlserver.md.

// goldenLock waits at most a minute (LockTimeout) and raises 51222
// (LockTimeoutError) when the lock is not granted: a schema upgrade
// elsewhere must not hold a Publish or Subscribe with no deadline.
const goldenLock = `SET NOCOUNT ON;
DECLARE @r int, @k nvarchar(max) = N'berth:' + SCHEMA_NAME() + N':' + @p1;
IF DATALENGTH(@k) / 2 > 255 SET @k = LEFT(@k, 222) + N':' + CONVERT(nvarchar(32), CAST(HASHBYTES('SHA2_256', @k) AS binary(16)), 2);
DECLARE @res nvarchar(255) = @k;
EXEC @r = sp_getapplock @Resource = @res, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = 60000;
IF @r < 0
BEGIN
	DECLARE @m nvarchar(2048) = N'berth: application lock ' + @res + N' not granted within 60000 ms (sp_getapplock returned ' + CAST(@r AS nvarchar(11)) + N'; -1 is a timeout): another session holds it, a schema upgrade or a consumer group registering';
	THROW 51222, @m, 1;
END;
SELECT CASE WHEN @r >= 0 THEN 1 ELSE 0 END;`

const goldenSharedLock = `SET NOCOUNT ON;
DECLARE @r int, @k nvarchar(max) = N'berth:' + SCHEMA_NAME() + N':' + @p1;
IF DATALENGTH(@k) / 2 > 255 SET @k = LEFT(@k, 222) + N':' + CONVERT(nvarchar(32), CAST(HASHBYTES('SHA2_256', @k) AS binary(16)), 2);
DECLARE @res nvarchar(255) = @k;
EXEC @r = sp_getapplock @Resource = @res, @LockMode = 'Shared', @LockOwner = 'Transaction', @LockTimeout = 60000;
IF @r < 0
BEGIN
	DECLARE @m nvarchar(2048) = N'berth: application lock ' + @res + N' not granted within 60000 ms (sp_getapplock returned ' + CAST(@r AS nvarchar(11)) + N'; -1 is a timeout): another session holds it, a schema upgrade or a consumer group registering';
	THROW 51222, @m, 1;
END;
SELECT CASE WHEN @r >= 0 THEN 1 ELSE 0 END;`

const goldenTryLock = `SET NOCOUNT ON;
DECLARE @r int, @k nvarchar(max) = N'berth:' + SCHEMA_NAME() + N':' + @p1;
IF DATALENGTH(@k) / 2 > 255 SET @k = LEFT(@k, 222) + N':' + CONVERT(nvarchar(32), CAST(HASHBYTES('SHA2_256', @k) AS binary(16)), 2);
DECLARE @res nvarchar(255) = @k;
EXEC @r = sp_getapplock @Resource = @res, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = 0;
SELECT CASE WHEN @r >= 0 THEN 1 ELSE 0 END;`

const goldenCreateSchema = `SET NOCOUNT ON;
IF SCHEMA_ID(N'app') IS NULL
	EXEC(N'CREATE SCHEMA [app]')`

const goldenVersionTable = `SET NOCOUNT ON;
IF OBJECT_ID(N'[app].[berth_schema_version]', N'U') IS NULL
CREATE TABLE [app].[berth_schema_version] (
	version    int          NOT NULL PRIMARY KEY,
	applied_at datetime2(3) NOT NULL DEFAULT SYSUTCDATETIME()
)`

const goldenSchemaVersion = `SET NOCOUNT ON;
SELECT COALESCE(MAX(version), 0) FROM [app].[berth_schema_version];`

const goldenSetSchemaVersion = `SET NOCOUNT ON;
IF NOT EXISTS (SELECT 1 FROM [app].[berth_schema_version] WHERE version = 1)
INSERT INTO [app].[berth_schema_version] (version) VALUES (1)`

const goldenSubscriptions = `SET NOCOUNT ON;
IF OBJECT_ID(N'[app].[berth_subscriptions]', N'U') IS NULL
CREATE TABLE [app].[berth_subscriptions] (
	topic          nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
	consumer_group nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
	queue_table    nvarchar(128) NOT NULL,
	created_at     datetime2(3)  NOT NULL DEFAULT SYSUTCDATETIME(),
	PRIMARY KEY (topic, consumer_group)
)`

const goldenErrors = `SET NOCOUNT ON;
IF OBJECT_ID(N'[app].[berth_errors]', N'U') IS NULL
CREATE TABLE [app].[berth_errors] (
	id           bigint IDENTITY(1, 1) NOT NULL PRIMARY KEY,
	queue_table  nvarchar(128)  NOT NULL,
	message_uuid nvarchar(255)  NOT NULL,
	headers      nvarchar(max)  NOT NULL,
	body         varbinary(max) NOT NULL,
	attempts     int            NOT NULL,
	reason       nvarchar(max)  NOT NULL,
	original_id  bigint         NOT NULL,
	created_at   datetime2(3)   NOT NULL,
	failed_at    datetime2(3)   NOT NULL DEFAULT SYSUTCDATETIME()
)`

const goldenErrorsIndex = `SET NOCOUNT ON;
IF INDEXPROPERTY(OBJECT_ID(N'[app].[berth_errors]'), N'berth_errors_queue', 'IndexID') IS NULL
CREATE INDEX [berth_errors_queue] ON [app].[berth_errors] (queue_table, failed_at)`

const goldenUpgradeQueues = `SET NOCOUNT ON;
SET LOCK_TIMEOUT 5000;
DECLARE @name nvarchar(128), @t nvarchar(300), @sql nvarchar(max), @online nvarchar(200);
DECLARE @done TABLE (name nvarchar(128) NOT NULL PRIMARY KEY);
WHILE 1 = 1
BEGIN
	SET @name = NULL;
	SELECT TOP (1) @name = s.queue_table FROM [app].[berth_subscriptions] AS s
	WHERE NOT EXISTS (SELECT 1 FROM @done AS d WHERE d.name = s.queue_table)
	ORDER BY s.queue_table;
	IF @name IS NULL BREAK;
	INSERT INTO @done (name) VALUES (@name);
	SET @t = N'[app].' + QUOTENAME(@name);
IF OBJECT_ID(@t, N'U') IS NOT NULL
BEGIN
	SET @online = CASE WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
			OR CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 AND CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 16
		THEN N'ONLINE = ON (WAIT_AT_LOW_PRIORITY (MAX_DURATION = 1 MINUTES, ABORT_AFTER_WAIT = SELF))'
		WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 THEN N'ONLINE = ON' END;
	IF COL_LENGTH(@t, N'ordering_key') IS NULL
	BEGIN
		SET @sql = N'ALTER TABLE ' + @t + N' ADD ordering_key nvarchar(255) COLLATE Latin1_General_100_BIN2 NULL';
		EXEC sp_executesql @sql;
	END;
	IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(@t) AND lock_escalation <> 1)
	BEGIN
		SET @sql = N'ALTER TABLE ' + @t + N' SET (LOCK_ESCALATION = DISABLE)';
		EXEC sp_executesql @sql;
	END;
	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') AND c.name = N'ordering_key')
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_pending') + N' ON ' + @t + N' (due_at, id) INCLUDE (expires_at, ordering_key) WHERE state = 0'
			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') IS NULL THEN N''
				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
		EXEC sp_executesql @sql;
	END;
	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_key', 'IndexID') IS NULL
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_key') + N' ON ' + @t + N' (ordering_key, id) WHERE ordering_key IS NOT NULL'
			+ COALESCE(N' WITH (' + @online + N')', N'');
		EXEC sp_executesql @sql;
	END;
	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_inflight', 'IndexID') IS NULL
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_inflight') + N' ON ' + @t + N' (ordering_key) WHERE ordering_key IS NOT NULL AND state > 0'
			+ COALESCE(N' WITH (' + @online + N')', N'');
		EXEC sp_executesql @sql;
	END;
	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_expiry', 'IndexID') IS NULL
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_expiry') + N' ON ' + @t + N' (expires_at) WHERE state = 0 AND expires_at IS NOT NULL'
			+ COALESCE(N' WITH (' + @online + N')', N'');
		EXEC sp_executesql @sql;
	END;
	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') AND c.name = N'state')
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_leased') + N' ON ' + @t + N' (lease_until) INCLUDE (attempts, state) WHERE state > 0'
			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') IS NULL THEN N''
				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
		EXEC sp_executesql @sql;
	END;
	IF CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 15 OR CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
	BEGIN
		SET @sql = N'IF EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(@t) AND index_id > 0 AND optimize_for_sequential_key = 0)
	ALTER INDEX ALL ON ' + @t + N' SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)';
		EXEC sp_executesql @sql, N'@t nvarchar(300)', @t = @t;
	END;
END;
END;`

const goldenQueueTable = `SET NOCOUNT ON;
SET LOCK_TIMEOUT 5000;
IF OBJECT_ID(N'[app].[berth_q_orders__billing]', N'U') IS NULL
BEGIN
CREATE TABLE [app].[berth_q_orders__billing] (
	id          bigint IDENTITY(1, 1) NOT NULL PRIMARY KEY CLUSTERED,
	uuid        nvarchar(255)  NOT NULL,
	headers     nvarchar(max)  NOT NULL,
	body        varbinary(max) NOT NULL,
	state       tinyint        NOT NULL DEFAULT 0,
	owner       bigint         NULL,
	attempts    int            NOT NULL DEFAULT 0,
	created_at  datetime2(3)   NOT NULL DEFAULT SYSUTCDATETIME(),
	due_at      datetime2(3)   NOT NULL DEFAULT SYSUTCDATETIME(),
	lease_until datetime2(3)   NULL,
	expires_at  datetime2(3)   NULL,
	ordering_key nvarchar(255) COLLATE Latin1_General_100_BIN2 NULL
);
ALTER TABLE [app].[berth_q_orders__billing] SET (LOCK_ESCALATION = DISABLE);
END`

const goldenPendingIndex = `SET NOCOUNT ON;
SET LOCK_TIMEOUT 5000;
IF INDEXPROPERTY(OBJECT_ID(N'[app].[berth_q_orders__billing]'), N'berth_q_orders__billing_pending', 'IndexID') IS NULL
CREATE INDEX [berth_q_orders__billing_pending] ON [app].[berth_q_orders__billing] (due_at, id) INCLUDE (expires_at, ordering_key) WHERE state = 0`

const goldenLeasedIndex = `SET NOCOUNT ON;
SET LOCK_TIMEOUT 5000;
IF INDEXPROPERTY(OBJECT_ID(N'[app].[berth_q_orders__billing]'), N'berth_q_orders__billing_leased', 'IndexID') IS NULL
CREATE INDEX [berth_q_orders__billing_leased] ON [app].[berth_q_orders__billing] (lease_until) INCLUDE (attempts, state) WHERE state > 0`

const goldenUpgradeQueue = `SET NOCOUNT ON;
SET LOCK_TIMEOUT 5000;
DECLARE @name nvarchar(128) = N'berth_q_orders__billing', @t nvarchar(300) = N'[app].[berth_q_orders__billing]', @sql nvarchar(max), @online nvarchar(200);
IF OBJECT_ID(@t, N'U') IS NOT NULL
BEGIN
	SET @online = CASE WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
			OR CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 AND CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 16
		THEN N'ONLINE = ON (WAIT_AT_LOW_PRIORITY (MAX_DURATION = 1 MINUTES, ABORT_AFTER_WAIT = SELF))'
		WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) = 3 THEN N'ONLINE = ON' END;
	IF COL_LENGTH(@t, N'ordering_key') IS NULL
	BEGIN
		SET @sql = N'ALTER TABLE ' + @t + N' ADD ordering_key nvarchar(255) COLLATE Latin1_General_100_BIN2 NULL';
		EXEC sp_executesql @sql;
	END;
	IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(@t) AND lock_escalation <> 1)
	BEGIN
		SET @sql = N'ALTER TABLE ' + @t + N' SET (LOCK_ESCALATION = DISABLE)';
		EXEC sp_executesql @sql;
	END;
	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') AND c.name = N'ordering_key')
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_pending') + N' ON ' + @t + N' (due_at, id) INCLUDE (expires_at, ordering_key) WHERE state = 0'
			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_pending', 'IndexID') IS NULL THEN N''
				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
		EXEC sp_executesql @sql;
	END;
	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_key', 'IndexID') IS NULL
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_key') + N' ON ' + @t + N' (ordering_key, id) WHERE ordering_key IS NOT NULL'
			+ COALESCE(N' WITH (' + @online + N')', N'');
		EXEC sp_executesql @sql;
	END;
	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_inflight', 'IndexID') IS NULL
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_inflight') + N' ON ' + @t + N' (ordering_key) WHERE ordering_key IS NOT NULL AND state > 0'
			+ COALESCE(N' WITH (' + @online + N')', N'');
		EXEC sp_executesql @sql;
	END;
	IF INDEXPROPERTY(OBJECT_ID(@t), @name + N'_expiry', 'IndexID') IS NULL
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_expiry') + N' ON ' + @t + N' (expires_at) WHERE state = 0 AND expires_at IS NOT NULL'
			+ COALESCE(N' WITH (' + @online + N')', N'');
		EXEC sp_executesql @sql;
	END;
	IF NOT EXISTS (SELECT 1 FROM sys.index_columns AS ic
		INNER JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
		WHERE ic.object_id = OBJECT_ID(@t) AND ic.index_id = INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') AND c.name = N'state')
	BEGIN
		SET @sql = N'CREATE INDEX ' + QUOTENAME(@name + N'_leased') + N' ON ' + @t + N' (lease_until) INCLUDE (attempts, state) WHERE state > 0'
			+ CASE WHEN INDEXPROPERTY(OBJECT_ID(@t), @name + N'_leased', 'IndexID') IS NULL THEN N''
				ELSE N' WITH (DROP_EXISTING = ON' + COALESCE(N', ' + @online, N'') + N')' END;
		EXEC sp_executesql @sql;
	END;
	IF CAST(SERVERPROPERTY('ProductMajorVersion') AS int) >= 15 OR CAST(SERVERPROPERTY('EngineEdition') AS int) IN (5, 8)
	BEGIN
		SET @sql = N'IF EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(@t) AND index_id > 0 AND optimize_for_sequential_key = 0)
	ALTER INDEX ALL ON ' + @t + N' SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)';
		EXEC sp_executesql @sql, N'@t nvarchar(300)', @t = @t;
	END;
END;
`

const goldenSubscribe = `SET NOCOUNT ON;
IF NOT EXISTS (SELECT 1 FROM [app].[berth_subscriptions] WITH (UPDLOCK, HOLDLOCK) WHERE topic = @p1 AND consumer_group = @p2)
INSERT INTO [app].[berth_subscriptions] (topic, consumer_group, queue_table) VALUES (@p1, @p2, @p3);`

const goldenSelectSubscriptions = `SET NOCOUNT ON;
SELECT queue_table FROM [app].[berth_subscriptions] WHERE topic = @p1 ORDER BY consumer_group;`

const goldenInsert2 = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
DECLARE @own bit = 0, @r int, @table nvarchar(11), @res nvarchar(255), @m nvarchar(2048), @prev nvarchar(255), @next nvarchar(255);
DECLARE @keys TABLE (k nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
INSERT INTO @keys (k)
SELECT DISTINCT j.k COLLATE Latin1_General_100_BIN2 FROM OPENJSON(@p2) WITH (k nvarchar(255) '$') AS j WHERE j.k IS NOT NULL;
BEGIN TRY
	SET @table = CAST(OBJECT_ID(N'[app].[berth_q_orders__billing]') AS nvarchar(11));
	IF @@TRANCOUNT = 0 AND EXISTS (SELECT 1 FROM @keys)
	BEGIN
		BEGIN TRANSACTION;
		SET @own = 1;
	END;
	WHILE 1 = 1
	BEGIN
		SET @next = NULL;
		SELECT TOP (1) @next = k FROM @keys WHERE @prev IS NULL OR k > @prev ORDER BY k;
		IF @next IS NULL BREAK;
		SET @res = N'berth:key:' + @table + N':' + CONVERT(nvarchar(64), HASHBYTES('SHA2_256', @next), 2);
		EXEC @r = sp_getapplock @Resource = @res, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = 60000;
		IF @r < 0
		BEGIN
			SET @m = N'berth: ordering key lock ' + @res + N' not granted within 60000 ms (sp_getapplock returned ' + CAST(@r AS nvarchar(11)) + N'; -1 is a timeout, -3 a deadlock victim): another transaction publishing the key holds it';
			THROW 51222, @m, 1;
		END;
		SET @prev = @next;
	END;
	INSERT INTO [app].[berth_q_orders__billing] (uuid, headers, body, due_at, expires_at, ordering_key)
	SELECT v.uuid, v.headers, v.body, DATEADD(millisecond, CAST(v.delay_ms % 1000 AS int), DATEADD(second, CAST(v.delay_ms / 1000 AS int), @now)),
		CASE WHEN v.ttl_ms > 0 THEN DATEADD(millisecond, CAST(v.ttl_ms % 1000 AS int), DATEADD(second, CAST(v.ttl_ms / 1000 AS int), @now)) END, v.ordering_key
	FROM OPENJSON(@p1) WITH (n int '$.n', uuid nvarchar(255) '$.u', headers nvarchar(max) '$.h', body varbinary(max) '$.b', delay_ms bigint '$.d', ttl_ms bigint '$.t', ordering_key nvarchar(255) '$.k') AS v
	ORDER BY v.n;
	IF @own = 1 COMMIT TRANSACTION;
END TRY
BEGIN CATCH
	IF @own = 1 AND @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
	THROW;
END CATCH;`

const goldenClaim = `SET NOCOUNT ON;
SET DEADLOCK_PRIORITY LOW;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
DECLARE @c TABLE (id bigint NOT NULL PRIMARY KEY);
DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NOT NULL, body varbinary(max) NOT NULL, attempts int NOT NULL);
INSERT INTO @c (id)
SELECT TOP (@p1) p.id
FROM [app].[berth_q_orders__billing] AS p WITH (INDEX([berth_q_orders__billing_pending]), FORCESEEK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
WHERE p.state = 0 AND p.due_at <= @now AND (p.expires_at IS NULL OR p.expires_at > @now)
	AND (p.ordering_key IS NULL OR (
		NOT EXISTS (SELECT 1 FROM [app].[berth_q_orders__billing] AS e WITH (INDEX([berth_q_orders__billing_key]), FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
			WHERE e.ordering_key IS NOT NULL AND e.ordering_key = p.ordering_key AND e.id < p.id)
		AND NOT EXISTS (SELECT 1 FROM [app].[berth_q_orders__billing] AS f WITH (INDEX([berth_q_orders__billing_inflight]), FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
			WHERE f.ordering_key IS NOT NULL AND f.state > 0 AND f.ordering_key = p.ordering_key)))
ORDER BY p.due_at, p.id;
UPDATE q SET state = 1, owner = @p2, lease_until = DATEADD(millisecond, CAST(@p3 % 1000 AS int), DATEADD(second, CAST(@p3 / 1000 AS int), @now))
OUTPUT inserted.id, inserted.uuid, inserted.headers, inserted.body, inserted.attempts INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
INNER JOIN @c AS c ON q.id = c.id
WHERE q.state = 0 AND q.due_at <= @now AND (q.expires_at IS NULL OR q.expires_at > @now);
SELECT id, uuid, headers, body, attempts FROM @t;`

// goldenClaimDirect is Claim's batch whose pick numbers its rows and
// whose take starts the first @p4 of them as Begin would (issue 37 item 9).
const goldenClaimDirect = `SET NOCOUNT ON;
SET DEADLOCK_PRIORITY LOW;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
DECLARE @c TABLE (id bigint NOT NULL PRIMARY KEY, started bit NOT NULL);
DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NULL, body varbinary(max) NULL, attempts int NOT NULL, state smallint NOT NULL);
` + goldenDirectPickTake + `SELECT id, uuid, headers, body, attempts, state FROM @t;`

// goldenDirectPickTake is the pick and take of ClaimDirect and
// ClaimComplete.
const goldenDirectPickTake = `INSERT INTO @c (id, started)
SELECT TOP (@p1) p.id, CASE WHEN ROW_NUMBER() OVER (ORDER BY p.due_at, p.id) <= @p4 THEN 1 ELSE 0 END
FROM [app].[berth_q_orders__billing] AS p WITH (INDEX([berth_q_orders__billing_pending]), FORCESEEK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
WHERE p.state = 0 AND p.due_at <= @now AND (p.expires_at IS NULL OR p.expires_at > @now)
	AND (p.ordering_key IS NULL OR (
		NOT EXISTS (SELECT 1 FROM [app].[berth_q_orders__billing] AS e WITH (INDEX([berth_q_orders__billing_key]), FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
			WHERE e.ordering_key IS NOT NULL AND e.ordering_key = p.ordering_key AND e.id < p.id)
		AND NOT EXISTS (SELECT 1 FROM [app].[berth_q_orders__billing] AS f WITH (INDEX([berth_q_orders__billing_inflight]), FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
			WHERE f.ordering_key IS NOT NULL AND f.state > 0 AND f.ordering_key = p.ordering_key)))
ORDER BY p.due_at, p.id;
` + goldenDirectTake

// goldenClaimComplete is ClaimDirect with Complete's DELETE of the refs in
// @p6 first, all in one transaction.
const goldenClaimComplete = `SET NOCOUNT ON;
SET DEADLOCK_PRIORITY LOW;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
SET XACT_ABORT ON;
DECLARE @c TABLE (id bigint NOT NULL PRIMARY KEY, started bit NOT NULL);
DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NULL, body varbinary(max) NULL, attempts int NOT NULL, state smallint NOT NULL);
BEGIN TRANSACTION;
DELETE q
OUTPUT deleted.id, N'', NULL, NULL, 0, -1 INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
INNER JOIN OPENJSON(@p6) WITH (id bigint '$.id', owner bigint '$.owner') AS r ON q.id = r.id AND q.owner = r.owner
WHERE q.state = 2
OPTION (LOOP JOIN);
` + goldenDirectPickTake + `COMMIT TRANSACTION;
SELECT id, uuid, headers, body, attempts, state FROM @t;`

// goldenClaimKeys is ClaimDirect whose pick reads the heads of the keys
// in @p6 (a JSON array into @keys): per key the first row of the key
// index, passing locked rows, then that row by primary key, checked by
// Claim's probes (issue 39).
const goldenClaimKeys = `SET NOCOUNT ON;
SET DEADLOCK_PRIORITY LOW;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
DECLARE @c TABLE (id bigint NOT NULL PRIMARY KEY, started bit NOT NULL);
DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NULL, body varbinary(max) NULL, attempts int NOT NULL, state smallint NOT NULL);
DECLARE @keys TABLE (k nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
INSERT INTO @keys (k)
SELECT DISTINCT j.k COLLATE Latin1_General_100_BIN2 FROM OPENJSON(@p6) WITH (k nvarchar(255) '$') AS j WHERE j.k IS NOT NULL;
` + goldenKeysPickTake + `SELECT id, uuid, headers, body, attempts, state FROM @t;`

// goldenDirectTake is the take of ClaimDirect and ClaimKeys: the picked
// rows by id, the first started, the others fetched.
const goldenDirectTake = `UPDATE q SET state = CASE WHEN c.started = 1 THEN 2 ELSE 1 END, owner = @p2,
	attempts = q.attempts + CASE WHEN c.started = 1 THEN 1 ELSE 0 END,
	lease_until = CASE WHEN c.started = 1 THEN DATEADD(millisecond, CAST(@p5 % 1000 AS int), DATEADD(second, CAST(@p5 / 1000 AS int), @now)) ELSE DATEADD(millisecond, CAST(@p3 % 1000 AS int), DATEADD(second, CAST(@p3 / 1000 AS int), @now)) END
OUTPUT inserted.id, inserted.uuid, inserted.headers, inserted.body, inserted.attempts, inserted.state INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
INNER JOIN @c AS c ON q.id = c.id
WHERE q.state = 0 AND q.due_at <= @now AND (q.expires_at IS NULL OR q.expires_at > @now);
`

// goldenKeysPickTake is ClaimKeys' pick and take.
const goldenKeysPickTake = `INSERT INTO @c (id, started)
SELECT TOP (@p1) p.id, CASE WHEN ROW_NUMBER() OVER (ORDER BY p.due_at, p.id) <= @p4 THEN 1 ELSE 0 END
FROM @keys AS k
CROSS APPLY (SELECT TOP (1) x.id FROM [app].[berth_q_orders__billing] AS x WITH (INDEX([berth_q_orders__billing_key]), FORCESEEK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
	WHERE x.ordering_key IS NOT NULL AND x.ordering_key = k.k ORDER BY x.id) AS h
INNER JOIN [app].[berth_q_orders__billing] AS p WITH (FORCESEEK, READPAST, ROWLOCK, READCOMMITTEDLOCK) ON p.id = h.id
WHERE p.state = 0 AND p.due_at <= @now AND (p.expires_at IS NULL OR p.expires_at > @now)
	AND p.ordering_key IS NOT NULL AND (
		NOT EXISTS (SELECT 1 FROM [app].[berth_q_orders__billing] AS e WITH (INDEX([berth_q_orders__billing_key]), FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
			WHERE e.ordering_key IS NOT NULL AND e.ordering_key = p.ordering_key AND e.id < p.id)
		AND NOT EXISTS (SELECT 1 FROM [app].[berth_q_orders__billing] AS f WITH (INDEX([berth_q_orders__billing_inflight]), FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
			WHERE f.ordering_key IS NOT NULL AND f.state > 0 AND f.ordering_key = p.ordering_key))
ORDER BY p.due_at, p.id
OPTION (LOOP JOIN);
` + goldenDirectTake

// goldenClaimKeysRiding is ClaimKeys with riding acks: ClaimComplete's
// transaction and DELETE (the refs in @p7) before the heads' pick.
const goldenClaimKeysRiding = `SET NOCOUNT ON;
SET DEADLOCK_PRIORITY LOW;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
SET XACT_ABORT ON;
DECLARE @c TABLE (id bigint NOT NULL PRIMARY KEY, started bit NOT NULL);
DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NULL, body varbinary(max) NULL, attempts int NOT NULL, state smallint NOT NULL);
DECLARE @keys TABLE (k nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
INSERT INTO @keys (k)
SELECT DISTINCT j.k COLLATE Latin1_General_100_BIN2 FROM OPENJSON(@p6) WITH (k nvarchar(255) '$') AS j WHERE j.k IS NOT NULL;
BEGIN TRANSACTION;
DELETE q
OUTPUT deleted.id, N'', NULL, NULL, 0, -1 INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
INNER JOIN OPENJSON(@p7) WITH (id bigint '$.id', owner bigint '$.owner') AS r ON q.id = r.id AND q.owner = r.owner
WHERE q.state = 2
OPTION (LOOP JOIN);
` + goldenKeysPickTake + `COMMIT TRANSACTION;
SELECT id, uuid, headers, body, attempts, state FROM @t;`

// goldenMultiProbe is the idle probe of probeQueues.
const goldenMultiProbe = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
SELECT N'berth_q_orders' AS queue_table,
	CASE WHEN EXISTS (SELECT TOP (1) 1 FROM [app].[berth_q_orders] WITH (INDEX([berth_q_orders_pending]), FORCESEEK, READPAST, READCOMMITTEDLOCK) WHERE state = 0 AND due_at <= @now AND (expires_at IS NULL OR expires_at > @now)) THEN 1 ELSE 0 END AS ready,
	(SELECT TOP (1) DATEDIFF_BIG(millisecond, @now, due_at) FROM [app].[berth_q_orders] WITH (INDEX([berth_q_orders_pending]), FORCESEEK, READPAST, READCOMMITTEDLOCK) WHERE state = 0 AND due_at > @now ORDER BY due_at) AS next_ms,
	CASE WHEN EXISTS (SELECT TOP (1) 1 FROM [app].[berth_q_orders] WITH (READPAST, READCOMMITTEDLOCK)) THEN 0 ELSE 1 END AS empty
UNION ALL
SELECT N'berth_q_orders__billing' AS queue_table,
	CASE WHEN EXISTS (SELECT TOP (1) 1 FROM [app].[berth_q_orders__billing] WITH (INDEX([berth_q_orders__billing_pending]), FORCESEEK, READPAST, READCOMMITTEDLOCK) WHERE state = 0 AND due_at <= @now AND (expires_at IS NULL OR expires_at > @now)) THEN 1 ELSE 0 END AS ready,
	(SELECT TOP (1) DATEDIFF_BIG(millisecond, @now, due_at) FROM [app].[berth_q_orders__billing] WITH (INDEX([berth_q_orders__billing_pending]), FORCESEEK, READPAST, READCOMMITTEDLOCK) WHERE state = 0 AND due_at > @now ORDER BY due_at) AS next_ms,
	CASE WHEN EXISTS (SELECT TOP (1) 1 FROM [app].[berth_q_orders__billing] WITH (READPAST, READCOMMITTEDLOCK)) THEN 0 ELSE 1 END AS empty;`

const goldenBegin = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
DECLARE @t TABLE (id bigint NOT NULL, attempts int NOT NULL);
UPDATE q SET state = 2, attempts = q.attempts + 1, lease_until = DATEADD(millisecond, CAST(@p2 % 1000 AS int), DATEADD(second, CAST(@p2 / 1000 AS int), @now))
OUTPUT inserted.id, inserted.attempts INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
INNER JOIN OPENJSON(@p1) WITH (id bigint '$.id', owner bigint '$.owner') AS r ON q.id = r.id AND q.owner = r.owner
WHERE q.state = 1
OPTION (LOOP JOIN);
SELECT id, attempts FROM @t;`

const goldenComplete = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @t TABLE (id bigint NOT NULL);
DELETE q
OUTPUT deleted.id INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
INNER JOIN OPENJSON(@p1) WITH (id bigint '$.id', owner bigint '$.owner') AS r ON q.id = r.id AND q.owner = r.owner
WHERE q.state = 2
OPTION (LOOP JOIN);
SELECT id FROM @t;`

const goldenRenew = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
DECLARE @t TABLE (id bigint NOT NULL);
UPDATE q SET lease_until = DATEADD(millisecond, CAST(@p2 % 1000 AS int), DATEADD(second, CAST(@p2 / 1000 AS int), @now))
OUTPUT inserted.id INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
INNER JOIN OPENJSON(@p1) WITH (id bigint '$.id', owner bigint '$.owner') AS r ON q.id = r.id AND q.owner = r.owner
WHERE q.state = 2
OPTION (LOOP JOIN);
SELECT id FROM @t;`

const goldenRetry = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
DECLARE @t TABLE (id bigint NOT NULL);
UPDATE q SET state = 0, owner = NULL, lease_until = NULL, due_at = DATEADD(millisecond, CAST(r.delay_ms % 1000 AS int), DATEADD(second, CAST(r.delay_ms / 1000 AS int), @now)),
	headers = CASE WHEN ISJSON(q.headers) = 0 OR LEFT(LTRIM(q.headers), 1) <> N'{' THEN q.headers
		ELSE JSON_MODIFY(q.headers, '$.berth_attempt_errors', CASE WHEN LEN(ISNULL(JSON_VALUE(q.headers, '$.berth_attempt_errors'), N'') + r.line) <= 2000 THEN ISNULL(JSON_VALUE(q.headers, '$.berth_attempt_errors'), N'') + r.line
			ELSE SUBSTRING(RIGHT(ISNULL(JSON_VALUE(q.headers, '$.berth_attempt_errors'), N'') + r.line, 2000), CHARINDEX(NCHAR(10), RIGHT(ISNULL(JSON_VALUE(q.headers, '$.berth_attempt_errors'), N'') + r.line, 2000)) + 1, 2000) END) END
OUTPUT inserted.id INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
INNER JOIN OPENJSON(@p1) WITH (id bigint '$.id', owner bigint '$.owner', delay_ms bigint '$.delay_ms', line nvarchar(1000) '$.line') AS r ON q.id = r.id AND q.owner = r.owner
WHERE q.state = 2
OPTION (LOOP JOIN);
SELECT id FROM @t;`

const goldenRelease = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @t TABLE (id bigint NOT NULL);
UPDATE q SET state = 0, owner = NULL, lease_until = NULL
OUTPUT inserted.id INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
INNER JOIN OPENJSON(@p1) WITH (id bigint '$.id', owner bigint '$.owner') AS r ON q.id = r.id AND q.owner = r.owner
WHERE q.state = 1
OPTION (LOOP JOIN);
SELECT id FROM @t;`

const goldenReleaseDirect = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @t TABLE (id bigint NOT NULL);
UPDATE q SET state = 0, owner = NULL, lease_until = NULL, attempts = CASE WHEN q.attempts > 0 THEN q.attempts - 1 ELSE 0 END
OUTPUT inserted.id INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (FORCESEEK, ROWLOCK, READCOMMITTEDLOCK)
INNER JOIN OPENJSON(@p1) WITH (id bigint '$.id', owner bigint '$.owner') AS r ON q.id = r.id AND q.owner = r.owner
WHERE q.state = 2
OPTION (LOOP JOIN);
SELECT id FROM @t;`

const goldenDeadLetter = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
SET XACT_ABORT ON;
DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NOT NULL, body varbinary(max) NOT NULL, attempts int NOT NULL, created_at datetime2(3) NOT NULL);
BEGIN TRANSACTION;
DELETE FROM [app].[berth_q_orders__billing] WITH (ROWLOCK)
OUTPUT deleted.id, deleted.uuid, deleted.headers, deleted.body, deleted.attempts, deleted.created_at INTO @t
WHERE id = @p1 AND owner = @p2 AND state IN (1, 2);
INSERT INTO [app].[berth_errors] (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at, failed_at)
SELECT @p3, uuid, headers, body, attempts, @p4, id, created_at, @now FROM @t ORDER BY id;
COMMIT TRANSACTION;
SELECT id FROM @t;`

const goldenRecover = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
DECLARE @t TABLE (id bigint NOT NULL);
UPDATE TOP (@p1) q SET state = 0, owner = NULL, lease_until = NULL
OUTPUT inserted.id INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (INDEX([berth_q_orders__billing_leased]), FORCESEEK, UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
WHERE q.state > 0 AND q.lease_until <= @now AND (q.state = 1 OR q.attempts < @p2);
SELECT id FROM @t;`

const goldenDeadLetterExpired = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
SET XACT_ABORT ON;
DECLARE @t TABLE (id bigint NOT NULL, uuid nvarchar(255) NOT NULL, headers nvarchar(max) NOT NULL, body varbinary(max) NOT NULL, attempts int NOT NULL, created_at datetime2(3) NOT NULL);
BEGIN TRANSACTION;
DELETE TOP (@p1) q
OUTPUT deleted.id, deleted.uuid, deleted.headers, deleted.body, deleted.attempts, deleted.created_at INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (INDEX([berth_q_orders__billing_leased]), FORCESEEK, UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
WHERE q.state > 0 AND q.lease_until <= @now AND q.state = 2 AND q.attempts >= @p2;
INSERT INTO [app].[berth_errors] (queue_table, message_uuid, headers, body, attempts, reason, original_id, created_at, failed_at)
SELECT @p3, uuid, headers, body, attempts, @p4, id, created_at, @now FROM @t ORDER BY id;
COMMIT TRANSACTION;
SELECT id FROM @t;`

const goldenDropExpired = `SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @now datetime2(3) = SYSUTCDATETIME();
DECLARE @t TABLE (id bigint NOT NULL);
DELETE TOP (@p1) q
OUTPUT deleted.id INTO @t
FROM [app].[berth_q_orders__billing] AS q WITH (INDEX([berth_q_orders__billing_expiry]), FORCESEEK, UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
WHERE q.state = 0 AND q.expires_at IS NOT NULL AND q.expires_at <= @now;
SELECT id FROM @t;`

const goldenQueueTables = `SET NOCOUNT ON;
SELECT DISTINCT queue_table FROM [app].[berth_subscriptions] ORDER BY queue_table;`
