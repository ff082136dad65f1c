package pg_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/testenv"
)

// rlsExempt lists the tables of the migrated schema that do not force row-level security,
// each with the reason. A table is added here deliberately, in review, or it must call
// strata_enable_rls (migrations/0001): TestEveryTableForcesRowLevelSecurityOrIsExempt fails
// on any other table without it.
var rlsExempt = map[string]string{
	"api_keys": "the key lookup: a request's org is what finding its key's hash tells (migrations/0001); " +
		"hashes, orgs, roles and names, no memory, and every query in internal/auth filters by org itself",
	"schema_migrations": "migration bookkeeping (internal/pg): versions, checksums and phases, no org",
	"strata_settings": "per-database settings (the audit HMAC key, migrations/0007), no org; " +
		"strata_app may read and insert, never change or delete",
	"strata_partition_moves": "the online partition mover's progress (migrations/0033): table names and counters, " +
		"no org; strata_app has no rights on it",
	"river_job": "River's job queue: River owns and queries it with no org; job args name orgs and ids " +
		"(extraction's user_id, deleted with its subject by an erasure), never memory",
	"river_leader":       "River's leader election, no org",
	"river_migration":    "River's schema versions, no org",
	"river_notification": "River's notification outbox, no org",
	"river_queue":        "River's queue settings and pause state, no org",
}

// schemaRLS walks every table of the database — partitioned parents and their partitions
// included (relkind 'r' and 'p'), in every schema but Postgres's own — and returns the ones
// without ENABLE and FORCE ROW LEVEL SECURITY that rlsExempt does not name, the exemptions
// that named no such table, and how many tables, partitioned parents and partitions it saw.
func schemaRLS(t *testing.T, conn *pgx.Conn) (missing, unused []string, tables, parents, partitions int) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT n.nspname, c.relname, c.relkind::text, c.relispartition, c.relrowsecurity, c.relforcerowsecurity
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
		  AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp%'
		ORDER BY 1, 2`)
	require.NoError(t, err)
	used := map[string]bool{}
	for rows.Next() {
		var schema, name, kind string
		var isPartition, rls, force bool
		require.NoError(t, rows.Scan(&schema, &name, &kind, &isPartition, &rls, &force))
		tables++
		if isPartition {
			partitions++
		}
		if kind == "p" {
			parents++
		}
		_, exempt := rlsExempt[name]
		exempt = exempt && schema == "public" // exemptions name tables of the migrations' schema
		switch {
		case rls && force:
			require.False(t, exempt, "%s forces row-level security now: drop its exemption", name)
		case exempt:
			used[name] = true
		default:
			missing = append(missing, schema+"."+name)
		}
	}
	require.NoError(t, rows.Err())
	for name := range rlsExempt {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	return missing, unused, tables, parents, partitions
}

// TestEveryTableForcesRowLevelSecurityOrIsExempt: no table of the migrated schema is outside
// row-level security by accident. A new table without it fails here until its migration
// calls strata_enable_rls or rlsExempt names it with a reason; so does a new partition.
func TestEveryTableForcesRowLevelSecurityOrIsExempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := testenv.OwnerConn(t, testenv.DatabaseURL(t))

	missing, unused, tables, parents, partitions := schemaRLS(t, conn)
	require.Empty(t, missing, "tables without ENABLE and FORCE ROW LEVEL SECURITY: call strata_enable_rls in "+
		"their migration, or add them to rlsExempt with the reason")
	require.Empty(t, unused, "exemptions naming no table without row-level security")
	// The walk saw the whole schema, partitions included (the template has 16 per big table).
	require.Greater(t, tables, 50)
	require.Equal(t, 3, parents)
	require.Equal(t, 3*16, partitions)

	// The check catches what a careless migration would add (this test's own database):
	// a plain table, another schema's table, and a partition of a parent that forces it.
	for _, stmt := range []string{
		`CREATE TABLE probe_plain (org_id text NOT NULL)`,
		`CREATE SCHEMA probe_schema`, `CREATE TABLE probe_schema.api_keys (org_id text NOT NULL)`,
		`CREATE TABLE probe_parted (org_id text NOT NULL) PARTITION BY LIST (org_id)`,
		`SELECT strata_enable_rls('probe_parted')`,
		`CREATE TABLE probe_parted_a PARTITION OF probe_parted FOR VALUES IN ('a')`,
	} {
		_, err := conn.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	missing, _, _, _, _ = schemaRLS(t, conn)
	require.ElementsMatch(t, []string{"public.probe_plain", "probe_schema.api_keys", "public.probe_parted_a"}, missing)
	for _, tbl := range []string{"probe_plain", "probe_schema.api_keys", "probe_parted_a"} {
		_, err := conn.Exec(ctx, `SELECT strata_enable_rls($1)`, tbl)
		require.NoError(t, err)
	}
	missing, _, _, _, _ = schemaRLS(t, conn)
	require.Empty(t, missing)
}
