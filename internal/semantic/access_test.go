package semantic_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestAccessLogCountsEveryAccess: many goroutines of two orgs count accesses at once, with
// flushes running in between; after the last flush each memory's access_count is exactly
// the number of accesses counted and last_accessed_at the latest, and nothing crossed orgs.
func TestAccessLogCountsEveryAccess(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	ctx := context.Background()
	store := semantic.NewStore(semantic.Options{}, nil)
	mems := map[string][]uuid.UUID{}
	for _, org := range []string{"acme", "globex"} {
		require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			for i := range 6 {
				m, _, err := store.Create(ctx, tx, newMem(org, "u1", fmt.Sprintf("%s fact number %d about colour grading", org, i)))
				if err != nil {
					return err
				}
				mems[org] = append(mems[org], m.ID)
			}
			return nil
		}))
	}
	reg := prometheus.NewRegistry()
	a := semantic.NewAccessLog(pool, nil, time.Hour, reg)
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const workers, rounds = 16, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				org := []string{"acme", "globex"}[w%2]
				// Every access serves memories 0..2; half of each org's workers also 3.
				ids := mems[org][:3]
				if w%4 >= 2 {
					ids = mems[org][:4]
				}
				a.Add(org, ids, base.Add(time.Duration(w*rounds+r)*time.Millisecond))
				if r%10 == 0 {
					assert.NoError(t, a.Flush(ctx))
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, a.Shutdown(ctx))
	require.Zero(t, a.Pending())

	type counted struct {
		n  int64
		at *time.Time
	}
	read := func(org string, where string, args ...any) (out []counted) {
		require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT access_count, last_accessed_at FROM memories `+where, args...)
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (counted, error) {
				var c counted
				return c, r.Scan(&c.n, &c.at)
			})
			return err
		}))
		return out
	}
	for _, org := range []string{"acme", "globex"} {
		for i, id := range mems[org] {
			got := read(org, `WHERE id = $1`, id)
			require.Len(t, got, 1)
			switch {
			case i < 3:
				require.EqualValues(t, workers/2*rounds, got[0].n, "%s memory %d", org, i)
				require.NotNil(t, got[0].at)
			case i == 3:
				require.EqualValues(t, workers/4*rounds, got[0].n, "%s memory 3", org)
			default:
				require.Zero(t, got[0].n, "%s memory %d was never served", org, i)
				require.Nil(t, got[0].at)
			}
		}
	}
	// The newest access wins: globex has the odd workers, the last one included.
	top := read("globex", `WHERE last_accessed_at IS NOT NULL ORDER BY last_accessed_at DESC LIMIT 1`)
	require.Equal(t, base.Add(time.Duration(workers*rounds-1)*time.Millisecond), top[0].at.UTC())
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	require.Positive(t, got["strata_memory_access_flushes_total"])
	require.Positive(t, got["strata_memory_access_rows_total"])
	require.Zero(t, got["strata_memory_access_flush_failures_total"])
	require.Zero(t, got["strata_memory_access_dropped_total"])
}

// TestAccessLogKeepsCountsWhenAFlushFails: a flush that cannot write (cancelled) keeps its
// counts; the next one writes them once.
func TestAccessLogKeepsCountsWhenAFlushFails(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	ctx := context.Background()
	id := createMemory(t, pool, "acme", "", "the client wants warm tones")
	a := semantic.NewAccessLog(pool, nil, time.Hour, nil)
	now := time.Now().UTC().Truncate(time.Microsecond)
	a.Add("acme", []uuid.UUID{id, id}, now)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, a.Flush(cancelled))
	require.Equal(t, 1, a.Pending(), "the failed flush kept its counts")
	a.Add("acme", []uuid.UUID{id}, now.Add(time.Second))
	require.NoError(t, a.Flush(ctx))
	require.NoError(t, a.Flush(ctx), "an empty flush is a no-op")
	var n int64
	var at time.Time
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT access_count, last_accessed_at FROM memories WHERE id = $1`, id).Scan(&n, &at)
	}))
	require.EqualValues(t, 3, n)
	require.Equal(t, now.Add(time.Second), at.UTC())
}

// TestAccessLogStartStop: the loop flushes on its own, and Shutdown writes what is left.
func TestAccessLogStartStop(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	ctx := context.Background()
	id := createMemory(t, pool, "acme", "", "keep the logo visible")
	count := func() (n int64) {
		require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT access_count FROM memories WHERE id = $1`, id).Scan(&n)
		}))
		return n
	}
	a := semantic.NewAccessLog(pool, nil, 20*time.Millisecond, nil)
	a.TestSignals.Flushed.Init(t)
	require.NoError(t, a.Start(ctx))
	a.Add("acme", []uuid.UUID{id}, time.Now())
	for count() != 1 { // the flush that ran before Add wrote nothing; the next one writes it
		require.NoError(t, a.TestSignals.Flushed.WaitOrTimeout(t))
	}
	a.Add("acme", []uuid.UUID{id}, time.Now())
	require.NoError(t, a.Shutdown(ctx))
	require.EqualValues(t, 2, count())
	require.NoError(t, a.Shutdown(ctx), "Shutdown twice")
}

// createMemory writes one memory of user ("": org-level) and returns its id.
func createMemory(t *testing.T, pool *pgxpool.Pool, org, user, text string) (id uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		m, _, err := semantic.NewStore(semantic.Options{}, nil).Create(ctx, tx, newMem(org, user, text))
		id = m.ID
		return err
	}))
	return id
}
