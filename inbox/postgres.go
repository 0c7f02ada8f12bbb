package inbox

import "github.com/inboxkit/inboxkit/dberr"

// sqlstateUniqueViolation is PostgreSQL's unique_violation.
const sqlstateUniqueViolation = "23505"

// Postgres is the PostgreSQL dialect, for the pgx stdlib driver
// (database/sql driver name "pgx"): import
// _ "github.com/inboxkit/inboxkit/driver/postgres" or
// _ "github.com/jackc/pgx/v5/stdlib". Duplicates are recognised by SQLSTATE
// 23505, read through the SQLState() method of the driver's error (package
// dberr), so this package links no driver.
var Postgres = Dialect{
	name:     "postgres",
	database: dberr.Postgres,
	support:  "github.com/inboxkit/inboxkit/driver/postgres",
	isDuplicate: codeIs(dberr.Postgres, func(c dberr.Code) bool {
		return c.SQLState == sqlstateUniqueViolation
	}),
	placeholder: dollar,
	purgeBatch:  pgPurgeBatch,
	limit:       func(n string) (string, string) { return "", " LIMIT " + n },
	timeArg:     utcTime,

	abortsOnError: true,

	claim: `SELECT %[3]s FROM %[1]s WHERE %[2]s ORDER BY CREATED_AT, EVENT_ID LIMIT @n FOR UPDATE SKIP LOCKED`,

	markUpsert:      pgMarkUpsert,
	customPlans:     `SET LOCAL plan_cache_mode = force_custom_plan`,
	aggregateMemory: `SET LOCAL work_mem = '64MB'`,
	multiRowInsert:  true,
	doNothing:       ` ON CONFLICT (EVENT_ID, CONSUMER_NAME) DO NOTHING`,

	schema: schemaSQL{
		varchar: "VARCHAR(%d)", integer: "INTEGER", count: "INTEGER DEFAULT 0 NOT NULL", time: "TIMESTAMP",
		created: "TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL", blob: "BYTEA", text: "TEXT",
		ifNotExists:  " IF NOT EXISTS",
		columnsQuery: `SELECT upper(column_name) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = lower($1)`,
		indexesQuery: `SELECT upper(indexname) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = lower($1)`,
		existsQuery:  `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = lower($1)`,
		// A session advisory lock.
		lock:             `SELECT pg_advisory_lock(` + pgMigrateLockKey + `)`,
		unlock:           `SELECT pg_advisory_unlock(` + pgMigrateLockKey + `)`,
		transactionalDDL: true,
	},
}

const pgMigrateLockKey = `hashtext('inboxkit.migrate.' || current_schema() || '.' || upper($1))`
