package app

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/testenv"
)

func TestInvalidConfigFailsFastNamingTheVariable(t *testing.T) {
	t.Parallel()
	env := map[string]string{"STRATA_EMBEDDER": "magic", "STRATA_HTTP_ADDR": "nope"}
	var out, errb bytes.Buffer
	err := Run(context.Background(), []string{"server"}, func(k string) string { return env[k] }, &out, &errb)
	require.Error(t, err)
	require.Contains(t, err.Error(), "STRATA_EMBEDDER")
	require.Contains(t, err.Error(), "STRATA_HTTP_ADDR")
}

func TestMigrateCommandIsIdempotent(t *testing.T) {
	t.Parallel()
	env := map[string]string{"STRATA_DATABASE_URL": testenv.DatabaseURL(t), "STRATA_LOG_LEVEL": "error"}
	for i := 0; i < 2; i++ {
		var out, errb bytes.Buffer
		require.NoError(t, Run(context.Background(), []string{"server", "migrate"}, func(k string) string { return env[k] }, &out, &errb), errb.String())
		require.Contains(t, out.String(), "migrations applied")
	}
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	require.Error(t, Run(context.Background(), []string{"server", "frobnicate"}, func(string) string { return "" }, &out, &errb))
	require.Contains(t, errb.String(), "usage")
}

// TestPartitionCommand: `server partition` on a database migrated unpartitioned (with a
// few rows) moves the three big tables and prints what it did; a rerun has nothing to do.
func TestPartitionCommand(t *testing.T) {
	t.Parallel()
	dsn := testenv.DatabaseURLPartitions(t, 0)
	_, err := testenv.OwnerConn(t, dsn).Exec(context.Background(), `INSERT INTO audit_log (org_id, actor_key_id, actor_role, action, entity_type)
		SELECT 'acme', 'k', 'agent', 'x', 'job' FROM generate_series(1, 50)`)
	require.NoError(t, err)
	env := map[string]string{"STRATA_DATABASE_URL": dsn, "STRATA_LOG_LEVEL": "error", "STRATA_PARTITIONS": "8"}
	var out, errb bytes.Buffer
	require.NoError(t, Run(context.Background(), []string{"server", "partition", "--batch", "20"}, func(k string) string { return env[k] }, &out, &errb), errb.String())
	require.Contains(t, out.String(), "audit_log: 50 rows copied into 8 partitions")
	require.Contains(t, out.String(), "memories: 0 rows copied into 8 partitions")
	require.NotContains(t, out.String(), "\r", "plain lines in a pipe")
	out.Reset()
	require.NoError(t, Run(context.Background(), []string{"server", "partition"}, func(k string) string { return env[k] }, &out, &errb), errb.String())
	require.Contains(t, out.String(), "audit_log: already partitioned (8 partitions)")
}
