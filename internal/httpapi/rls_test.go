package httpapi_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestRowLevelSecurityBindsOnServerConnections runs deliberately unfiltered queries on the
// very pool configuration the server uses and checks they see only the transaction's org.
func TestRowLevelSecurityBindsOnServerConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.Pool(t)

	var super, bypass bool
	var user string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user`).Scan(&user, &super, &bypass))
	require.Equal(t, pg.AppRole, user)
	require.False(t, super)
	require.False(t, bypass)

	for _, org := range []string{"org-a", "org-b"} {
		require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (org_id, key, request_hash, method, path, response_status, expires_at)
				VALUES ($1, 'k', '\x00', 'POST', '/x', 200, now() + interval '1 hour')`, org)
			return err
		}))
	}
	count := func(tx pgx.Tx) int {
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&n)) // no org filter on purpose
		return n
	}
	require.NoError(t, pg.InOrgTx(ctx, pool, "org-a", func(tx pgx.Tx) error {
		require.Equal(t, 1, count(tx))
		return nil
	}))
	// No org set at all (the setting is unset or ''): sees nothing.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, count(tx))
	_, err = tx.Exec(ctx, `SELECT set_config('app.org_id', '', true)`)
	require.NoError(t, err)
	require.Equal(t, 0, count(tx))
	require.NoError(t, tx.Rollback(ctx))

	// Writing another org's row from org-a's transaction is refused.
	err = pg.InOrgTx(ctx, pool, "org-a", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (org_id, key, request_hash, method, path, response_status, expires_at)
			VALUES ('org-b', 'k2', '\x00', 'POST', '/x', 200, now())`)
		return err
	})
	require.Error(t, err)

	// The owner (migrations) sees both: the rows exist.
	var all int
	require.NoError(t, testenv.OwnerConn(t, dsn).QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&all))
	require.Equal(t, 2, all)
}

// TestEveryTenantTableForcesRowLevelSecurity checks the schema: every table with an org_id
// column has forced row-level security and its primary key leads with org_id. Partitions
// (migrations/0033) are tables too: each forces it as its parent does, though requests
// reach them only through the parent (strata_app has no rights on a partition).
func TestEveryTenantTableForcesRowLevelSecurity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := testenv.OwnerConn(t, testenv.DatabaseURL(t))
	// Tables that are lookups, not memory (documented in migrations).
	exempt := map[string]bool{"api_keys": true}
	// Looked up by a secret's hash before the org is known (console sign-in sessions,
	// migrations/0028): keyed by that hash, like a key lookup. It forces row-level security
	// all the same (migrations/0039); the lookup runs through a SECURITY DEFINER function.
	lookups := map[string]bool{"console_sessions": true}
	rows, err := conn.Query(ctx, `
		SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
		       coalesce((SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		                 WHERE i.indrelid = c.oid AND i.indisprimary), '')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
		  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'org_id' AND NOT a.attisdropped)`)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var name, pkFirst string
		var rls, force bool
		require.NoError(t, rows.Scan(&name, &rls, &force, &pkFirst))
		n++
		if !lookups[name] {
			require.Equal(t, "org_id", pkFirst, "primary key of %s must lead with org_id", name)
		}
		if exempt[name] {
			continue
		}
		require.True(t, rls && force, "table %s must call strata_enable_rls", name)
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, n, 2)

	// The template is migrated with the default partition count: the big tables are
	// partitioned, and the request role can use none of their partitions directly.
	var parts, granted int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE has_table_privilege('strata_app', c.oid, 'SELECT,INSERT,UPDATE,DELETE'))
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent IN ('episodic_events'::regclass, 'memories'::regclass, 'audit_log'::regclass)`).Scan(&parts, &granted))
	require.Equal(t, 3*16, parts)
	require.Zero(t, granted, "strata_app must not reach a partition directly")
}
