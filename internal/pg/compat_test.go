package pg_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/migrations"
)

// release is the migration list of a build: the embedded files plus extra ones (a later
// release's), so a test can play an older binary (fewer files) against a newer schema.
func release(t *testing.T, extra map[string]string) fstest.MapFS {
	t.Helper()
	all, err := pg.LoadMigrations(migrations.FS)
	require.NoError(t, err)
	out := fstest.MapFS{}
	for _, m := range all {
		b, err := migrations.FS.ReadFile(m.File)
		require.NoError(t, err)
		out[m.File] = &fstest.MapFile{Data: b}
	}
	for name, sql := range extra {
		out[name] = &fstest.MapFile{Data: []byte(sql)}
	}
	return out
}

const (
	expandProbe = "-- strata:phase expand\n" +
		"CREATE TABLE compat_probe (org_id text NOT NULL, id int NOT NULL, note text, PRIMARY KEY (org_id, id));\n" +
		"INSERT INTO compat_probe SELECT 'o', g, NULL FROM generate_series(1, 500) g;\n"
	contractProbe = "-- strata:phase contract\n" +
		"ALTER TABLE compat_probe DROP COLUMN note;\n"
)

// TestMigrateSchemaCompatibilityGate plays the rolling upgrade with the real migrator: a
// build whose code is older than the schema starts while the schema is ahead only by
// expand steps (and says so at INFO), and refuses to start, naming the release to deploy,
// once a contract step it does not know has been applied — both through `server` (migrate
// then serve) and through the check a server run with STRATA_NO_MIGRATE makes.
func TestMigrateSchemaCompatibilityGate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn := testenv.DatabaseURL(t) // every embedded migration applied

	current := release(t, nil)
	next := release(t, map[string]string{"9001_compat_probe.sql": expandProbe})
	after := release(t, map[string]string{"9001_compat_probe.sql": expandProbe, "9002_compat_probe_contract.sql": contractProbe})

	// Release N+1 applies its expand step.
	n, err := pg.Migrate(ctx, dsn, next, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// Release N, started again (a replica restarting mid-rollout), still starts: the schema
	// is ahead of it by one compatible migration, and the log says so.
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	n, err = pg.Migrate(ctx, dsn, current, log)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Contains(t, logs.String(), "schema is ahead of this build")
	require.Contains(t, logs.String(), "compatible=1")

	// Release N+2 contracts.
	n, err = pg.Migrate(ctx, dsn, after, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// Release N and N+1 now refuse to start, naming what to deploy.
	want := "this database was contracted by migration 9002 (requires Strata built with migration >= 9002); deploy that release or newer"
	for name, build := range map[string]fstest.MapFS{"N": current, "N+1": next} {
		_, err = pg.Migrate(ctx, dsn, build, nil)
		require.ErrorContains(t, err, want, "release %s", name)
		var contracted *pg.ContractedError
		require.ErrorAs(t, err, &contracted)
		// A server that does not migrate at start checks the same.
		_, err = pg.CheckSchema(ctx, dsn, build, nil)
		require.ErrorContains(t, err, want, "release %s without migrating", name)
	}
	// Nothing of the refused builds ran: the contract still stands, and its row says what it
	// requires.
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer c.Close(ctx)
	var phase string
	var requires int
	require.NoError(t, c.QueryRow(ctx, "SELECT phase, requires_build FROM schema_migrations WHERE version = 9002").Scan(&phase, &requires))
	require.Equal(t, "contract", phase)
	require.Equal(t, 9002, requires)
	require.NoError(t, c.QueryRow(ctx, "SELECT phase, requires_build FROM schema_migrations WHERE version = 9001").Scan(&phase, &requires))
	require.Equal(t, "expand", phase)
	require.Zero(t, requires)

	// A contract that names an older build it lets run (requires 9001: release N+1 had
	// already stopped using the column) refuses only the builds older than that.
	dsn2 := testenv.DatabaseURL(t)
	lenient := release(t, map[string]string{"9001_compat_probe.sql": expandProbe,
		"9002_compat_probe_contract.sql": strings.Replace(contractProbe, "contract", "contract requires 9001", 1)})
	// Deployed straight onto release N's schema (N+1 skipped), it would contract under N's
	// running servers: refused, nothing applied.
	_, err = pg.Migrate(ctx, dsn2, lenient, nil)
	require.ErrorContains(t, err, "deploy the release with migration 9001 first")
	st, err := pg.ReadSchemaStatus(ctx, dsn2, lenient)
	require.NoError(t, err)
	require.Len(t, st.Pending, 2)
	_, err = pg.Migrate(ctx, dsn2, next, nil)
	require.NoError(t, err)
	n, err = pg.Migrate(ctx, dsn2, lenient, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	logs.Reset()
	st, err = pg.CheckSchema(ctx, dsn2, next, log)
	require.NoError(t, err)
	require.Len(t, st.Ahead, 1)
	require.Contains(t, logs.String(), "compatible=1")
	_, err = pg.CheckSchema(ctx, dsn2, current, nil)
	require.ErrorContains(t, err, "this database was contracted by migration 9002 (requires Strata built with migration >= 9001)")
	// N+2 itself starts.
	n, err = pg.Migrate(ctx, dsn, after, nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestMigrateConcurrentIndexOutsideTransaction: a file marked strata:no-transaction runs
// its statements one by one outside a transaction, so CREATE INDEX CONCURRENTLY works, and
// three replicas migrating a fresh database at once all succeed: one applies every file,
// the others wait for the lock without holding a snapshot (a waiter blocked inside
// pg_advisory_lock would hold one, and the concurrent build waits for every older
// snapshot: a deadlock) and then find everything applied.
func TestMigrateConcurrentIndexOutsideTransaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn := emptyDatabase(t)
	build := release(t, map[string]string{
		"9001_compat_probe.sql": expandProbe,
		"9002_compat_probe_index.sql": "-- strata:phase expand\n-- strata:no-transaction\n" +
			"DROP INDEX CONCURRENTLY IF EXISTS compat_probe_id;\n" +
			"CREATE INDEX CONCURRENTLY compat_probe_id ON compat_probe (id);\n",
	})
	all, err := pg.LoadMigrations(build)
	require.NoError(t, err)

	var wg sync.WaitGroup
	applied := make([]int, 3)
	errs := make([]error, 3)
	for i := range applied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = pg.Migrate(ctx, dsn, build, nil)
		}()
	}
	wg.Wait()
	for i := range applied {
		require.NoError(t, errs[i], "migrator %d", i)
	}
	require.ElementsMatch(t, []int{len(all), 0, 0}, applied)

	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer c.Close(ctx)
	var valid bool
	require.NoError(t, c.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'compat_probe_id'::regclass`).Scan(&valid))
	require.True(t, valid)
	v, err := pg.SchemaVersion(ctx, c)
	require.NoError(t, err)
	require.Equal(t, 9002, v)
}
