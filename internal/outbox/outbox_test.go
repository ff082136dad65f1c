package outbox_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// emitAtCommit runs one write the way a request does: the emission queued as the last
// statement before COMMIT (EmitSQL), with a pause between them that widens the window in
// which another transaction could commit a later seq first.
func emitAtCommit(ctx context.Context, t *testing.T, pool *pgxpool.Pool, org string, e outbox.New, pause time.Duration) {
	t.Helper()
	sql, args, err := outbox.EmitSQL(org, e)
	require.NoError(t, err)
	err = pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return err
		}
		time.Sleep(pause)
		return nil
	})
	require.NoError(t, err)
}

// TestConcurrentEmittersNeverSkipAReader is the ordering guarantee: writers emitting for one
// org concurrently (and for another org in between), each pausing between its emission and
// its COMMIT, while a reader follows "seq > cursor" as the SSE stream and the dispatcher do.
// The reader must end with every committed event, once, in increasing seq order.
func TestConcurrentEmittersNeverSkipAReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Pool(t)
	const writers, each = 6, 15
	var wg sync.WaitGroup
	var stop atomic.Bool
	var got []outbox.Event
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		var cursor int64
		for {
			last := stop.Load() // one more read after the writers are done
			err := pg.InOrgTx(ctx, pool, "o1", func(tx pgx.Tx) error {
				evs, err := outbox.List(ctx, tx, "o1", outbox.Filter{After: cursor, Limit: 7})
				for _, e := range evs {
					got = append(got, e)
					cursor = e.Seq
				}
				return err
			})
			if err != nil {
				t.Errorf("reading: %v", err)
				return
			}
			if last {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				org := "o1"
				if i%3 == 2 {
					org = "o2" // another org's events draw from the same sequence meanwhile
				}
				emitAtCommit(ctx, t, pool, org, outbox.New{Type: outbox.HandoffPending, JobID: fmt.Sprint("j", w),
					Data: map[string]any{"n": i}}, time.Duration(rand.IntN(4))*time.Millisecond)
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	<-readerDone
	// A reader that skipped nothing has all of o1's committed events.
	var all []outbox.Event
	require.NoError(t, pg.InOrgTx(ctx, pool, "o1", func(tx pgx.Tx) error {
		var err error
		all, err = outbox.List(ctx, tx, "o1", outbox.Filter{Limit: 1000})
		return err
	}))
	require.Len(t, all, writers*each*2/3)
	require.Equal(t, len(all), len(got), "the following reader skipped events")
	for i := range got {
		require.Equal(t, all[i].ID, got[i].ID)
		if i > 0 {
			require.Greater(t, got[i].Seq, got[i-1].Seq)
		}
	}
	var head int64
	require.NoError(t, pg.InOrgTx(ctx, pool, "o1", func(tx pgx.Tx) error {
		var err error
		head, err = outbox.Head(ctx, tx, "o1")
		return err
	}))
	require.Equal(t, all[len(all)-1].Seq, head)
}

// TestEmitDedupesAndListsOrgs: a dedupe key emits once; Orgs finds every org with events
// (the skip scan of migration 0037) with its newest seq; a rolled-back emission leaves
// nothing.
func TestEmitDedupesAndListsOrgs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Pool(t)
	for _, org := range []string{"b", "a", "c", "a"} {
		emitAtCommit(ctx, t, pool, org, outbox.New{Type: outbox.JobCompleted, JobID: "j", DedupeKey: "job.completed:j"}, 0)
		emitAtCommit(ctx, t, pool, org, outbox.New{Type: outbox.StepFailed, JobID: "j"}, 0)
	}
	err := pg.InOrgTx(ctx, pool, "d", func(tx pgx.Tx) error {
		if err := outbox.Emit(ctx, tx, "d", outbox.New{Type: outbox.StepFailed}); err != nil {
			return err
		}
		return fmt.Errorf("refused")
	})
	require.EqualError(t, err, "refused")
	heads, err := outbox.Orgs(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, []string{heads[0].OrgID, heads[1].OrgID, heads[2].OrgID})
	require.Len(t, heads, 3)
	for _, h := range heads {
		var evs []outbox.Event
		require.NoError(t, pg.InOrgTx(ctx, pool, h.OrgID, func(tx pgx.Tx) error {
			evs, err = outbox.List(ctx, tx, h.OrgID, outbox.Filter{})
			return err
		}))
		types := []string{}
		for _, e := range evs {
			types = append(types, e.Type)
		}
		if h.OrgID == "a" {
			require.Equal(t, []string{outbox.JobCompleted, outbox.StepFailed, outbox.StepFailed}, types)
		} else {
			require.Equal(t, []string{outbox.JobCompleted, outbox.StepFailed}, types)
		}
		require.Equal(t, evs[len(evs)-1].Seq, h.LastSeq)
	}
}

// TestWakerWakesLocallyAndCoalescesPeerNotifications: Emitted calls Local at once, and the
// other replicas hear of a burst of emissions in a few notifications, never of this one's
// own instance mixed up with another org.
func TestWakerWakesLocallyAndCoalescesPeerNotifications(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.Pool(t)
	peer := testenv.OwnerConn(t, dsn)
	_, err := peer.Exec(ctx, "LISTEN "+outbox.PeerChannel)
	require.NoError(t, err)
	var mu sync.Mutex
	var local []string
	w := &outbox.Waker{Pool: pool, Instance: "inst1", Every: 50 * time.Millisecond, Local: func(org string) {
		mu.Lock()
		local = append(local, org)
		mu.Unlock()
	}}
	w.Emitted("early") // before Start: local only
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	for i := range 200 {
		w.Emitted([]string{"o1", "o2"}[i%2])
	}
	mu.Lock()
	require.Len(t, local, 201)
	require.Equal(t, "early", local[0])
	mu.Unlock()
	seen := map[string]int{}
	notes := 0
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for seen["o1"] == 0 || seen["o2"] == 0 {
		n, err := peer.WaitForNotification(wctx)
		require.NoError(t, err, "seen %v", seen)
		from, org := outbox.ParsePeer(n.Payload)
		require.Equal(t, "inst1", from)
		seen[org]++
		notes++
	}
	require.LessOrEqual(t, notes, 4, "a burst is told in a few notifications, not one per event")
	require.False(t, slices.Contains(slices.Collect(maps.Keys(seen)), "early"))
}
