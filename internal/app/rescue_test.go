package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/consolidation"
)

// TestStuckJobsRescuedWithinTheSetting: a Postgres cut (or a SIGKILL) between a job's work
// and River's record of its completion leaves the job `running` with nobody working it.
// River took such a job for stuck only after an hour, and a job summary stuck so (unique per
// job while running) could not even be queued again. With STRATA_JOB_RESCUE_AFTER the next
// replica retries it within the setting (a worker with a longer timeout of its own, as the
// job summary's 5 minutes, once that has passed too), and the retry's effect is had once: the
// job whose summary had committed before the cut keeps its one memory, the other gets one.
func TestStuckJobsRescuedWithinTheSetting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := apptest.Start(t, apptest.NoAutoConsolidation())
	admin, agent := a.NewKey("rescue", "admin"), a.NewKey("rescue", "agent")
	finish := func(job string) {
		t.Helper()
		require.Equal(t, 201, a.Do("PUT", "/v1/jobs/"+job, agent, map[string]any{"goal": "render " + job}).Status)
		r := a.Do("POST", "/v1/jobs/"+job+"/complete", agent, map[string]any{"outcome": "delivered " + job})
		require.Equal(t, 200, r.Status, "%s", r.Body)
	}
	// "done": its summary committed, then the cut kept River from marking its job completed.
	finish("done")
	r := a.Do("POST", "/v1/admin/consolidation/run", admin, map[string]any{"tasks": []string{"job_summaries"}})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	// "cut": the cut came before its summary committed.
	finish("cut")
	a.Stop()

	// Both jobs as the dead replica left them: queued by River (with their unique keys),
	// fetched by its producer (running, attempt 1, attempted by the dead client) 5 min 10 s
	// ago — past the job summary's own timeout — and never finished.
	pool, err := pgxpool.New(ctx, a.DBURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	var ids []int64
	for _, job := range []string{"done", "cut"} {
		res, err := inserter.Insert(ctx, consolidation.SummarizeJobArgs{Org: "rescue", JobID: job}, nil)
		require.NoError(t, err)
		require.False(t, res.UniqueSkippedAsDuplicate)
		ids = append(ids, res.Job.ID)
	}
	tag, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1,
		attempted_at = now() - interval '5 minutes 10 seconds', attempted_by = ARRAY['killed-replica']
		WHERE id = ANY($1)`, ids)
	require.NoError(t, err)
	require.EqualValues(t, 2, tag.RowsAffected())

	start := time.Now()
	// (Its outbox poll runs at start-up and then hourly: the stuck "cut" job's unique key
	// keeps the poll from queueing it again; only the rescue can finish it.)
	apptest.Start(t, apptest.Env("STRATA_OUTBOX_POLL", "1h"), apptest.Env("STRATA_DATABASE_URL", a.DBURL),
		apptest.Env("STRATA_REDIS_PREFIX", a.Prefix), apptest.Env("STRATA_ADMIN_KEY", a.AdminKey),
		apptest.Env("STRATA_JOB_TIMEOUT", "2s"), apptest.Env("STRATA_JOB_RESCUE_AFTER", "3s"))
	completed := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state = 'completed'`, ids).Scan(&n))
		return n
	}
	// River's rescuer runs when the replica becomes leader, then every 30 s; the retry waits
	// about a second. The old horizon (an hour) leaves both running.
	for deadline := time.Now().Add(45 * time.Second); completed() < 2; time.Sleep(100 * time.Millisecond) { // kept: polls River's table for the rescue
		if time.Now().After(deadline) {
			rows, _ := pool.Query(ctx, `SELECT id, state::text, attempt FROM river_job WHERE id = ANY($1)`, ids)
			states, _ := pgx.CollectRows(rows, pgx.RowToMap)
			t.Fatalf("the stuck jobs were not done again within 45 s: %v", states)
		}
	}
	t.Logf("both stuck jobs were rescued and completed %v after the replica started", time.Since(start).Round(time.Millisecond))

	// Exactly once in effect: one memory per job, the "done" job's the one it had.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SELECT set_config('app.org_id', 'rescue', true)`)
	require.NoError(t, err)
	var summarized, memories int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM job_consolidation
		WHERE job_id IN ('done', 'cut') AND summary_memory_id IS NOT NULL`).Scan(&summarized))
	require.Equal(t, 2, summarized)
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM memories`).Scan(&memories))
	require.Equal(t, 2, memories, "each job has one memory: the retry of the job whose summary had committed wrote none")
	var attempts []int
	rows, err := tx.Query(ctx, `SELECT attempt FROM river_job WHERE id = ANY($1) ORDER BY id`, ids)
	require.NoError(t, err)
	attempts, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{2, 2}, attempts, "each stuck job ran once more")
}
