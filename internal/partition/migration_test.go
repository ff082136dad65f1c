package partition_test

import (
	"context"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/partition"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/migrations"
)

// layout reports relkind and partition count of each big table.
func layout(t *testing.T, dsn string) map[string][2]any {
	t.Helper()
	out := map[string][2]any{}
	owner := testenv.OwnerConn(t, dsn)
	for _, tbl := range partition.Tables {
		var kind string
		var n int
		require.NoError(t, owner.QueryRow(context.Background(), `SELECT relkind::text, (SELECT count(*) FROM pg_inherits WHERE inhparent = c.oid)
			FROM pg_class c WHERE oid = $1::regclass`, tbl).Scan(&kind, &n))
		out[tbl] = [2]any{kind, n}
	}
	return out
}

// TestMigrationPartitionCount: the migration gives each big table the partition count it
// is handed (each partition forcing row-level security, none reachable by the request
// role, the count recorded in strata_settings), and 0 leaves them unpartitioned.
func TestMigrationPartitionCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, n := range []int{0, 3} {
		dsn := testenv.DatabaseURLPartitions(t, n)
		for tbl, l := range layout(t, dsn) {
			if n == 0 {
				require.Equal(t, [2]any{"r", 0}, l, tbl)
			} else {
				require.Equal(t, [2]any{"p", n}, l, tbl)
			}
		}
		owner := testenv.OwnerConn(t, dsn)
		var setting string
		require.NoError(t, owner.QueryRow(ctx, `SELECT value FROM strata_settings WHERE name = 'partitions'`).Scan(&setting))
		require.Equal(t, map[int]string{0: "0", 3: "3"}[n], setting)
		var unforced, reachable int
		require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT (c.relrowsecurity AND c.relforcerowsecurity)),
				count(*) FILTER (WHERE has_table_privilege('strata_app', c.oid, 'SELECT,INSERT,UPDATE,DELETE'))
			FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent IN ('episodic_events'::regclass, 'memories'::regclass, 'audit_log'::regclass)`).Scan(&unforced, &reachable))
		require.Zero(t, unforced)
		require.Zero(t, reachable)
	}
}

// TestMigrationLeavesTablesWithRows: a database that already holds events when 0033
// runs keeps episodic_events as it is (the migration must not copy millions of rows in
// one transaction); the empty tables are converted; the mover then finishes the job.
func TestMigrationLeavesTablesWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.EmptyDatabaseURL(t)
	before := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, n := range names {
		if n < "0033" {
			b, err := fs.ReadFile(migrations.FS, n)
			require.NoError(t, err)
			before[n] = &fstest.MapFile{Data: b}
		}
	}
	_, err = pg.Migrate(ctx, dsn, before, nil)
	require.NoError(t, err)
	owner := testenv.OwnerConn(t, dsn)
	_, err = owner.Exec(ctx, `INSERT INTO episodic_events (org_id, job_id, seq, op, params, fingerprint)
		SELECT 'acme', 'j', g, 'edit', '{}', sha256(g::text::bytea) FROM generate_series(1, 100) g`)
	require.NoError(t, err)

	_, err = migrations.ApplyWith(ctx, dsn, nil, migrations.Options{Partitions: 4})
	require.NoError(t, err)
	l := layout(t, dsn)
	require.Equal(t, [2]any{"r", 0}, l["episodic_events"], "a table with rows is left to the mover")
	require.Equal(t, [2]any{"p", 4}, l["memories"])
	require.Equal(t, [2]any{"p", 4}, l["audit_log"])
	var forced bool
	require.NoError(t, owner.QueryRow(ctx, `SELECT relforcerowsecurity FROM pg_class WHERE oid = 'episodic_events'::regclass`).Scan(&forced))
	require.True(t, forced, "the look at the rows put forced row-level security back")

	rep, err := partition.Move(ctx, dsn, partition.Options{Partitions: 4})
	require.NoError(t, err)
	require.Equal(t, int64(100), rep[0].Copied)
	require.Equal(t, [2]any{"p", 4}, layout(t, dsn)["episodic_events"])
	var n int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM episodic_events`).Scan(&n))
	require.Equal(t, 100, n)
}
