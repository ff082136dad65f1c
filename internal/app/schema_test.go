package app

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/testenv"
)

// TestServerRefusesSchemaContractedPastItsCode plays this build as the older release: a
// newer release's migrator has recorded migrations this build does not embed. Ahead by an
// expand migration, `server migrate` succeeds and says so; once a contract migration that
// requires a newer build is recorded, `server` (migrating at start or not) and `server
// migrate` exit with the message that names the release to deploy, and `server migrate
// --status` shows why.
func TestServerRefusesSchemaContractedPastItsCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.DatabaseURL(t)
	owner := testenv.OwnerConn(t, dsn)
	env := map[string]string{"STRATA_DATABASE_URL": dsn, "STRATA_LOG_LEVEL": "info", "STRATA_REDIS_URL": "redis://127.0.0.1:1/0"}
	run := func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		err := Run(ctx, append([]string{"server"}, args...), func(k string) string { return env[k] }, &out, &errb)
		return out.String(), errb.String(), err
	}

	_, err := owner.Exec(ctx, `INSERT INTO schema_migrations (version, name, checksum, phase, requires_build)
		VALUES (9001, 'next_release_expand', 'x', 'expand', 0)`)
	require.NoError(t, err)
	out, logs, err := run("migrate")
	require.NoError(t, err, logs)
	require.Contains(t, out, "migrations applied")
	require.Contains(t, logs, "schema is ahead of this build by compatible migrations only")
	out, _, err = run("migrate", "--status")
	require.NoError(t, err)
	require.Contains(t, out, "ahead:   9001_next_release_expand (expand)")
	require.Contains(t, out, "verdict: compatible: the schema is ahead of this build by 1 migration(s)")

	_, err = owner.Exec(ctx, `INSERT INTO schema_migrations (version, name, checksum, phase, requires_build)
		VALUES (9002, 'next_release_contract', 'x', 'contract', 9002)`)
	require.NoError(t, err)
	want := "this database was contracted by migration 9002 (requires Strata built with migration >= 9002); deploy that release or newer"
	_, _, err = run("migrate")
	require.ErrorContains(t, err, want)
	_, _, err = run() // serve: refused before it connects to anything else (Redis here is unreachable)
	require.ErrorContains(t, err, want)
	env["STRATA_NO_MIGRATE"] = "true"
	_, _, err = run()
	require.ErrorContains(t, err, "checking the schema of") // the check alone, no migration run
	require.ErrorContains(t, err, want)
	out, _, err = run("migrate", "--status")
	require.ErrorContains(t, err, want)
	require.Contains(t, out, "ahead:   9002_next_release_contract (contract, requires build >= 9002)")
	require.Contains(t, out, "verdict: refused")
}
