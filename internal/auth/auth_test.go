package auth_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/service"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestRevocationReachesEveryReplica: two replicas' key stores cache a key; a revocation
// through one is refused by the other within the notification's delivery.
func TestRevocationReachesEveryReplica(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pool, dsn := testenv.Pool(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, b := auth.NewStore(pool, "", "root"), auth.NewStore(pool, "", "root")
	ready := make(chan struct{})
	go a.Listen(ctx, dsn, log, ready)
	<-ready
	// b listens through the service form, and tells the test each notification it handled.
	var notified service.TestSignal[string]
	notified.Init(t)
	bl := b.Listener()
	loop := &pg.ListenLoop{DSN: dsn, Channels: []string{auth.RevocationChannel}, Log: log, What: "API key revocation",
		Listener: pg.Listener{Up: bl.Up, Notify: func(channel, payload string) {
			bl.Notify(channel, payload)
			notified.Signal(payload)
		}}}
	loop.TestSignals.Listening.Init(t)
	require.NoError(t, loop.Start(ctx))
	t.Cleanup(loop.Stop)
	loop.TestSignals.Listening.WaitOrTimeout(t)
	var secret, id string
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		k, sec, err := a.Create(ctx, tx, "acme", strata.RoleAgent, "", "test")
		secret, id = sec, k.ID
		return err
	}))
	for _, s := range []*auth.Store{a, b} {
		p, err := s.Authenticate(ctx, secret)
		require.NoError(t, err)
		require.Equal(t, "acme", p.OrgID)
	}
	// Cached now: prove it by breaking the table underneath (a cached lookup ignores it).
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		_, err := a.Revoke(ctx, tx, "acme", id)
		return err
	}))
	// Once b has handled a notification sent after the revocation, it refuses the key.
	for {
		notified.WaitOrTimeout(t) // fails the test if no notification reaches b
		_, err := b.Authenticate(ctx, secret)
		if err != nil {
			require.ErrorIs(t, err, strata.ErrNotFound)
			break
		}
	}
}

// TestOrgOfAndExists: the lookups the root key's revocation and quarantines make.
func TestOrgOfAndExists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Pool(t)
	s := auth.NewStore(pool, "", "root")
	org := "orgof-" + time.Now().Format("150405.000000000")
	var id string
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		k, _, err := s.Create(ctx, tx, org, strata.RoleAgent, "", "test")
		id = k.ID
		return err
	}))
	got, err := s.OrgOf(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, org, got)
	_, err = s.OrgOf(ctx, pool, "00000000-0000-0000-0000-000000000000")
	require.ErrorIs(t, err, strata.ErrNotFound)
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		ok, err := s.Exists(ctx, tx, org, id)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.Exists(ctx, tx, org, "00000000-0000-0000-0000-000000000000")
		require.NoError(t, err)
		require.False(t, ok)
		return nil
	}))
	ok, err := s.Exists(ctx, pool, "another-"+org, id)
	require.NoError(t, err)
	require.False(t, ok)
}

// TestCachedAuthenticateAllocatesNothing: every request authenticates; a cached key costs
// no allocation (the secret is hashed from a stack buffer, Postgres is asked only on a miss).
func TestCachedAuthenticateAllocatesNothing(t *testing.T) { // not parallel: AllocsPerRun
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pool, dsn := testenv.Pool(t)
	s := auth.NewStore(pool, "", "root")
	ready := make(chan struct{})
	go s.Listen(ctx, dsn, slog.New(slog.NewTextHandler(io.Discard, nil)), ready)
	<-ready
	var secret string
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		_, sec, err := s.Create(ctx, tx, "acme", strata.RoleAgent, "", "test")
		secret = sec
		return err
	}))
	p, err := s.Authenticate(ctx, secret) // the miss that fills the cache
	require.NoError(t, err)
	require.Equal(t, "acme", p.OrgID)
	var got auth.Principal
	require.Zero(t, testing.AllocsPerRun(100, func() { got, err = s.Authenticate(ctx, secret) }))
	require.NoError(t, err)
	require.Equal(t, p, got)
	_, err = s.Authenticate(ctx, secret+"x")
	require.ErrorIs(t, err, strata.ErrNotFound)
}

// TestPrincipalContext: the caller travels in the context with the context's other values
// and its cancellation, in one allocation.
func TestPrincipalContext(t *testing.T) { // not parallel: AllocsPerRun
	type otherKey struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), otherKey{}, "v"))
	p := auth.Principal{KeyID: "k1", OrgID: "acme", Role: strata.RoleAgent}
	ctx, shared := auth.WithPrincipalShared(parent, p)
	got, ok := auth.FromContext(ctx)
	require.True(t, ok)
	require.Equal(t, p, got)
	require.Equal(t, p, *shared)
	require.Equal(t, "v", ctx.Value(otherKey{}))
	_, ok = auth.FromContext(parent)
	require.False(t, ok)
	child, stop := context.WithCancel(auth.WithPrincipal(ctx, auth.Principal{KeyID: "k2"}))
	defer stop()
	got, _ = auth.FromContext(child)
	require.Equal(t, "k2", got.KeyID, "the innermost caller wins")
	cancel()
	<-child.Done()
	require.ErrorIs(t, child.Err(), context.Canceled)
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { ctx, _ = auth.WithPrincipalShared(parent, p) }))
}
