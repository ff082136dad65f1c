package pg_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/migrations"
)

func emptyDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testenv.BaseDatabaseURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	name := "strata_m_" + testenv.RandomID(6)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), testenv.BaseDatabaseURL())
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(testenv.BaseDatabaseURL())
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

func TestMigrateConcurrentReplicasAndRerun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := emptyDatabase(t)
	all, err := pg.LoadMigrations(migrations.FS)
	require.NoError(t, err)

	// Four replicas start at once: each migration is applied exactly once.
	var wg sync.WaitGroup
	applied := make([]int, 4)
	errs := make([]error, 4)
	for i := range applied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = pg.Migrate(ctx, dsn, migrations.FS, nil)
		}()
	}
	wg.Wait()
	for i := range applied {
		require.NoError(t, errs[i])
	}
	// One replica applied every file while the others waited, then found them applied.
	require.ElementsMatch(t, []int{len(all), 0, 0, 0}, applied)

	// Re-running is a no-op.
	n, err := pg.Migrate(ctx, dsn, migrations.FS, nil)
	require.NoError(t, err)
	require.Zero(t, n)

	// A failing migration leaves the schema as it was.
	bad := fstest.MapFS{}
	for _, m := range all {
		b, _ := migrations.FS.ReadFile(m.File)
		bad[m.File] = &fstest.MapFile{Data: b}
	}
	bad["9999_broken.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE half_done (id int); SELECT 1/0;")}
	_, err = pg.Migrate(ctx, dsn, bad, nil)
	require.ErrorContains(t, err, "9999_broken")
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer c.Close(ctx)
	var exists bool
	require.NoError(t, c.QueryRow(ctx, "SELECT to_regclass('half_done') IS NOT NULL").Scan(&exists))
	require.False(t, exists)
	v, err := pg.SchemaVersion(ctx, c)
	require.NoError(t, err)
	require.Equal(t, all[len(all)-1].Version, v)

	// An applied file that changed is refused.
	changed := fstest.MapFS{}
	for k, f := range bad {
		changed[k] = f
	}
	delete(changed, "9999_broken.sql")
	first := all[0].File
	changed[first] = &fstest.MapFile{Data: append([]byte("-- edited\n"), bad[first].Data...)}
	_, err = pg.Migrate(ctx, dsn, changed, nil)
	require.ErrorContains(t, err, "was changed after it was applied")
}
