package gdpr_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// restrictionChecker asks a cache about users of org, loading through the pool under the
// org's row-level security, and counts the loads (round trips to Postgres).
type restrictionChecker struct {
	pool  *pgxpool.Pool
	cache *gdpr.RestrictionCache
	loads atomic.Int64
	// during, when set, runs inside a load (a notification arriving mid-load).
	during func()
}

func (c *restrictionChecker) restricted(t *testing.T, org, user string) bool {
	t.Helper()
	var m map[string]bool
	require.NoError(t, pg.InOrgTx(context.Background(), c.pool, org, func(tx pgx.Tx) error {
		var err error
		m, err = c.cache.Among(org, []string{user, "someone-else"}, func(sql string, args ...any) ([]string, error) {
			c.loads.Add(1)
			if c.during != nil {
				c.during()
			}
			rows, err := tx.Query(context.Background(), sql, args...)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[string])
		})
		return err
	}))
	return m[user]
}

func setRestricted(t *testing.T, pool *pgxpool.Pool, org, user string, on bool) {
	t.Helper()
	require.NoError(t, pg.InOrgTx(context.Background(), pool, org, func(tx pgx.Tx) error {
		if on {
			_, _, err := gdpr.Restrict(context.Background(), tx, org, user, "key-test", "test", time.Now())
			return err
		}
		return gdpr.Unrestrict(context.Background(), tx, org, user)
	}))
}

// TestRestrictionCacheAcrossReplicas: two replicas' caches answer from memory, and a
// restriction or its lifting committed anywhere (here: by neither replica, so only the
// notification tells them) reaches both within the notification's delivery.
func TestRestrictionCacheAcrossReplicas(t *testing.T) {
	t.Parallel()
	pool, dsn := testenv.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var replicas []*restrictionChecker
	for range 2 {
		c := &restrictionChecker{pool: pool, cache: gdpr.NewRestrictionCache()}
		ready := make(chan struct{})
		go c.cache.Listen(ctx, dsn, log, ready)
		<-ready
		replicas = append(replicas, c)
	}

	for _, r := range replicas {
		require.False(t, r.restricted(t, "acme", "u1"))
		require.False(t, r.restricted(t, "acme", "u1"))
		require.False(t, r.restricted(t, "acme", "u2"))
		require.EqualValues(t, 1, r.loads.Load(), "the org's set is loaded once, then answered from memory")
	}

	setRestricted(t, pool, "acme", "u1", true)
	for _, r := range replicas {
		require.Eventually(t, func() bool { return r.restricted(t, "acme", "u1") }, 5*time.Second, 5*time.Millisecond)
		require.False(t, r.restricted(t, "acme", "u2"))
	}
	// Another org's restriction is its own: acme's cached set stays and answers.
	before := replicas[0].loads.Load()
	setRestricted(t, pool, "globex", "u2", true)
	require.Eventually(t, func() bool { return replicas[0].restricted(t, "globex", "u2") }, 5*time.Second, 5*time.Millisecond)
	require.True(t, replicas[0].restricted(t, "acme", "u1"))
	require.False(t, replicas[0].restricted(t, "acme", "u2"))
	require.EqualValues(t, before+1, replicas[0].loads.Load(), "globex loaded; acme still from memory")

	setRestricted(t, pool, "acme", "u1", false)
	for _, r := range replicas {
		require.Eventually(t, func() bool { return !r.restricted(t, "acme", "u1") }, 5*time.Second, 5*time.Millisecond)
	}

	// The erasure deletes the row with its own statement: the trigger notifies for any writer.
	setRestricted(t, pool, "acme", "u3", true)
	require.Eventually(t, func() bool { return replicas[1].restricted(t, "acme", "u3") }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, pg.InOrgTx(context.Background(), pool, "acme", func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `DELETE FROM gdpr_restrictions WHERE org_id = 'acme' AND user_id = 'u3'`)
		return err
	}))
	require.Eventually(t, func() bool { return !replicas[1].restricted(t, "acme", "u3") }, 5*time.Second, 5*time.Millisecond)

	// Forget (the restricting replica, before its response) drops the set at once.
	r := replicas[0]
	require.False(t, r.restricted(t, "acme", "u4"))
	n := r.loads.Load()
	r.cache.Forget("acme")
	require.False(t, r.restricted(t, "acme", "u4"))
	require.EqualValues(t, n+1, r.loads.Load())
}

// TestRestrictionCacheOffWithoutListener: a cache that is not listening asks Postgres for
// every check, and sees a restriction the moment it commits.
func TestRestrictionCacheOffWithoutListener(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	c := &restrictionChecker{pool: pool, cache: gdpr.NewRestrictionCache()}
	require.False(t, c.restricted(t, "acme", "u1"))
	setRestricted(t, pool, "acme", "u1", true)
	require.True(t, c.restricted(t, "acme", "u1"))
	require.EqualValues(t, 2, c.loads.Load())

	var none *gdpr.RestrictionCache // no cache at all: the same
	n := &restrictionChecker{pool: pool, cache: none}
	require.True(t, n.restricted(t, "acme", "u1"))
	require.False(t, n.restricted(t, "acme", "u2"))
}

// TestRestrictionCacheLoadRacingANotification: a set loaded while a notification arrived
// may predate the change it announces, so it is not kept.
func TestRestrictionCacheLoadRacingANotification(t *testing.T) {
	t.Parallel()
	pool, dsn := testenv.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &restrictionChecker{pool: pool, cache: gdpr.NewRestrictionCache()}
	ready := make(chan struct{})
	go c.cache.Listen(ctx, dsn, slog.New(slog.NewTextHandler(io.Discard, nil)), ready)
	<-ready
	c.during = func() { c.cache.Forget("acme") }
	require.False(t, c.restricted(t, "acme", "u1"))
	c.during = nil
	require.False(t, c.restricted(t, "acme", "u1"))
	require.EqualValues(t, 2, c.loads.Load(), "the raced load was not kept")
	require.False(t, c.restricted(t, "acme", "u1"))
	require.EqualValues(t, 2, c.loads.Load())
}
