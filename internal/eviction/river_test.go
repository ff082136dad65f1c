package eviction_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/eviction"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/queue"
)

type countingOrgWorker struct {
	river.WorkerDefaults[eviction.OrgArgs]
	inner *eviction.OrgWorker
	runs  *atomic.Int32
}

func (w *countingOrgWorker) Work(ctx context.Context, job *river.Job[eviction.OrgArgs]) error {
	w.runs.Add(1)
	return w.inner.Work(ctx, job)
}

// Two worker processes (two River clients with their own pools) on one database: both
// schedule the org's eviction for the same period, it runs once, and its audit records are
// written once.
func TestEvictionTwoWorkerProcessesRunEachOrgOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := off()
	p.Memories.Default.MaxInactivity = sp("30d")
	e.setPolicy(p)
	for i := range 5 {
		e.memory(fmt.Sprintf("stale fact %d", i), memOpt{})
	}
	e.clock.Advance(31 * day)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	var runs atomic.Int32
	var clients []*queue.Client
	for range 2 {
		pool, err := pg.NewPool(e.ctx, e.dsn, pg.PoolOptions{MaxConns: 4})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		ev := newEvictor(cfg, pool, e.rdb, log, e.clock.Now)
		workers := river.NewWorkers()
		river.AddWorker(workers, &countingOrgWorker{inner: &eviction.OrgWorker{Pool: pool, Evictor: ev}, runs: &runs})
		c, err := queue.New(pool, log, queue.Config{Workers: workers, MaxWorkers: 2})
		require.NoError(t, err)
		clients = append(clients, c)
	}
	// What each replica's eviction_schedule inserts for the period.
	opts := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
	for _, c := range clients {
		_, err := c.Insert(e.ctx, eviction.OrgArgs{Org: org}, opts)
		require.NoError(t, err)
	}
	// River reports each job it completed: wait on those events, not on a sleep.
	completed := make(chan *river.Event, 16)
	for _, c := range clients {
		sub, cancel := c.Subscribe(river.EventKindJobCompleted)
		t.Cleanup(cancel)
		go func() {
			for ev := range sub {
				select {
				case completed <- ev:
				default: // the test only needs to know that something completed
				}
			}
		}()
	}
	for _, c := range clients {
		require.NoError(t, c.Start(e.ctx))
	}
	t.Cleanup(func() {
		for _, c := range clients {
			_ = queue.Stop(e.ctx, c)
		}
	})
	timeout := time.After(30 * time.Second)
	for {
		var left int
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE kind = 'evict_org' AND state <> 'completed'`).Scan(&left))
		if left == 0 {
			break
		}
		select {
		case <-completed:
		case <-timeout:
			t.Fatal("evict_org never completed")
		}
	}
	require.EqualValues(t, 1, runs.Load())
	var jobsN, audits int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE kind = 'evict_org'`).Scan(&jobsN))
	require.Equal(t, 1, jobsN)
	e.tx(func(tx pgx.Tx) error {
		return tx.QueryRow(e.ctx, `SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'evict'`, org).Scan(&audits)
	})
	require.Equal(t, 1, audits)
	require.Equal(t, 0, e.run(false).Total)
}
