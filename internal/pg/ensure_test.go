package pg_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestEnsureDatabaseConcurrentCreators: replicas starting at once against a missing
// database all start. Two CREATE DATABASE statements racing for one name fail the loser
// with 42P04 (exists) or, when both pass the existence check, with 23505 on
// pg_database_datname_index; neither may stop a replica.
func TestEnsureDatabaseConcurrentCreators(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := range 6 {
		name := "strata_race_" + testenv.RandomID(6)
		t.Cleanup(func() {
			c, err := pgx.Connect(context.Background(), testenv.BaseDatabaseURL())
			if err != nil {
				return
			}
			defer c.Close(context.Background())
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		})
		u, err := url.Parse(testenv.BaseDatabaseURL())
		require.NoError(t, err)
		u.Path = "/" + name
		dsn := u.String()
		const replicas = 6
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, replicas)
		for i := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = pg.EnsureDatabase(ctx, dsn)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d, replica %d", round, i)
		}
		c, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		require.NoError(t, c.Close(ctx))
	}
}
