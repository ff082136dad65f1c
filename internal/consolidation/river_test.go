package consolidation_test

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/queue"
)

// Two worker processes — two River clients, each with its own pool and consolidator — on
// one database: every finished job gets exactly one job memory, written once, however
// often the outbox is dispatched and by whom.
func TestTwoWorkerProcessesSummarizeEachJobOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 16
	for i := range n {
		e.mediaJob(fmt.Sprintf("job-%02d", i), "u1")
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	var mu sync.Mutex
	written := map[string]int{}
	executions := 0
	var clients []*queue.Client
	for range 2 {
		pool, err := pg.NewPool(e.ctx, e.dsn, pg.PoolOptions{MaxConns: 8})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		c := newConsolidator(e.cfg, pool, e.emb, log, e.clock.Now)
		workers := river.NewWorkers()
		river.AddWorker(workers, &consolidation.DispatchWorker{Consolidator: c, ExtraOrg: org})
		river.AddWorker(workers, &consolidation.SummarizeJobWorker{Consolidator: c, Done: func(r consolidation.ConsolidatedJob) {
			mu.Lock()
			defer mu.Unlock()
			executions++
			if r.Status == "written" {
				written[r.JobID]++
			}
		}})
		client, err := queue.New(pool, log, queue.Config{Workers: workers, MaxWorkers: 4})
		require.NoError(t, err)
		clients = append(clients, client)
	}
	// Both processes dispatch the outbox, and both also enqueue some jobs directly: River's
	// uniqueness keeps one job per (org, job).
	for _, c := range clients {
		_, err := c.Insert(e.ctx, consolidation.DispatchArgs{}, nil)
		require.NoError(t, err)
		for i := range 4 {
			_, err := c.Insert(e.ctx, consolidation.SummarizeJobArgs{Org: org, JobID: fmt.Sprintf("job-%02d", i)}, nil)
			require.NoError(t, err)
		}
	}
	// River reports each job it completed: wait on those events, not on a sleep.
	completed := make(chan *river.Event, 64)
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

	// Dispatch again from the second process while the first may still be working.
	_, err := clients[1].Insert(e.ctx, consolidation.DispatchArgs{}, &river.InsertOpts{UniqueOpts: river.UniqueOpts{}})
	require.NoError(t, err)

	timeout := time.After(45 * time.Second)
	for {
		done := 0
		for i := range n {
			if e.outboxProcessed(fmt.Sprintf("job-%02d", i)) {
				done++
			}
		}
		mu.Lock()
		reported := len(written) // Done runs after the worker's commit, which outboxProcessed sees first
		mu.Unlock()
		if done == n && reported == n {
			break
		}
		select {
		case <-completed:
		case <-timeout:
			t.Fatalf("only %d of %d outbox rows processed", done, n)
		}
	}

	ms := e.jobMemories()
	require.Len(t, ms, n)
	perJob := map[string]int{}
	for _, m := range ms {
		perJob[m.Metadata["job_id"].(string)]++
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		id := fmt.Sprintf("job-%02d", i)
		require.Equal(t, 1, perJob[id], id)
		require.Equal(t, 1, written[id], "%s written once", id)
	}
	owner := pg.DBTX(e.pool)
	var queued int
	require.NoError(t, owner.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE kind = 'consolidate_job'`).Scan(&queued))
	require.Equal(t, n, queued, "one River job per finished job")
	require.Equal(t, n, executions, "each ran once")
}
