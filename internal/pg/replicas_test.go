package pg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// The router's rule on a clock it is handed: a standby serves a key's reads once it is
// fresh as of a time after the key's last write, never while a write is in flight, and
// nobody's once it is fresh only as of more than MaxLag ago; a standby that does not answer
// is skipped. (The same database stands in for the standby here: a server not in recovery
// reports its current LSN; TestReadReplicaRouting runs a real streaming standby.)
func TestReplicaRouterRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, dsn := testenv.Pool(t)
	clock := testenv.NewClock(time.Now())
	dead := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/x?sslmode=disable&connect_timeout=1", testenv.FreePort(t))
	r, err := pg.NewReplicas(ctx, primary, []string{dead, dsn}, pg.PoolOptions{MaxConns: 2},
		pg.ReplicaOptions{MaxLag: time.Second, Interval: 100 * time.Millisecond, Now: clock.Now})
	require.NoError(t, err)
	t.Cleanup(r.Close)

	require.Nil(t, r.ForRead("k1"), "no sample yet: the primary")
	r.Sample(ctx)
	st := r.Status()
	require.False(t, st[0].Up, "the dead standby")
	require.True(t, st[1].Up && st[1].Usable, "%+v", st[1])
	live := r.ForRead("k1")
	require.NotNil(t, live)
	for i := 0; i < 4; i++ {
		require.Same(t, live, r.ForRead("k1"), "the dead standby is skipped, every time")
	}

	// A write in flight, then just ended: k1 reads from the primary until a sample after
	// the write; k2 is not affected.
	clock.Advance(10 * time.Millisecond)
	r.BeginWrite("k1")
	require.Nil(t, r.ForRead("k1"))
	require.Same(t, live, r.ForRead("k2"))
	clock.Advance(10 * time.Millisecond)
	r.EndWrite("k1")
	require.Nil(t, r.ForRead("k1"), "the standby is not yet known to hold k1's write")
	clock.Advance(10 * time.Millisecond)
	r.Sample(ctx)
	require.Same(t, live, r.ForRead("k1"), "fresh past k1's write")

	// No sample for longer than MaxLag: the standby is skipped for everyone.
	clock.Advance(1100 * time.Millisecond)
	require.Nil(t, r.ForRead("k2"))
	require.False(t, r.Status()[1].Usable)
	r.Sample(ctx)
	require.Same(t, live, r.ForRead("k2"))
}
