package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/strata"
)

// ListJobs with Parent answers a job's direct forks (not grandchildren, not another org's),
// paged, through the jobs_forks index.
func TestListJobsForksOfAJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for _, org := range []string{"acme", "other"} {
		e.job(org, "p", jobs.JobSpec{})
		require.NoError(t, e.tx(org, func(tx pgx.Tx) error {
			_, err := e.store.PutCheckpoint(ctx, tx, org, "p", jobs.CheckpointInput{NextAction: "x"}, nil)
			return err
		}))
	}
	fork := func(org, from, id string) {
		require.NoError(t, e.tx(org, func(tx pgx.Tx) error {
			_, _, err := e.store.Fork(ctx, tx, org, from, 1, jobs.ForkInput{NewJobID: id})
			return err
		}))
	}
	fork("acme", "p", "f1")
	fork("acme", "p", "f2")
	fork("acme", "f1", "g1") // a grandchild
	fork("other", "p", "o1")
	for i := range 5 {
		e.job("acme", "unrelated-"+string(rune('a'+i)), jobs.JobSpec{})
	}
	list := func(org string, f jobs.ListFilter) []string {
		var ids []string
		require.NoError(t, e.tx(org, func(tx pgx.Tx) error {
			items, err := e.store.ListJobs(ctx, tx, org, f)
			for _, it := range items {
				ids = append(ids, it.JobID)
			}
			return err
		}))
		return ids
	}
	require.Equal(t, []string{"f1", "f2"}, list("acme", jobs.ListFilter{Parent: "p"}))
	require.Equal(t, []string{"f2"}, list("acme", jobs.ListFilter{Parent: "p", After: "f1"}))
	require.Equal(t, []string{"f1"}, list("acme", jobs.ListFilter{Parent: "p", Limit: 1}))
	require.Equal(t, []string{"g1"}, list("acme", jobs.ListFilter{Parent: "f1"}))
	require.Equal(t, []string{"f1", "f2"}, list("acme", jobs.ListFilter{Parent: "p", Status: "running"}))
	require.Empty(t, list("acme", jobs.ListFilter{Parent: "p", Status: "completed"}))
	require.Equal(t, []string{"o1"}, list("other", jobs.ListFilter{Parent: "p"}))
	require.Empty(t, list("acme", jobs.ListFilter{Parent: "nope"}))
	err := e.tx("acme", func(tx pgx.Tx) error {
		_, err := e.store.ListJobs(ctx, tx, "acme", jobs.ListFilter{Parent: "bad id"})
		return err
	})
	var fe *strata.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Equal(t, "parent_job_id", fe.Field)

	// Among many jobs, the statement reads the partial index jobs_forks (org_id,
	// parent_job_id, job_id): the filter and the order, not the org's every job.
	var plan []string
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		// An org of many jobs, few of them forks.
		if _, err := tx.Exec(ctx, `INSERT INTO jobs (org_id, job_id, goal, status, owner, metadata, checkpoint_version,
				progress_at, created_at, updated_at)
			SELECT 'acme', 'bulk-' || g, '', 'running', '', '{}', 0, now(), now(), now() FROM generate_series(1, 20000) g`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `EXPLAIN SELECT job_id FROM jobs
			WHERE org_id = $1 AND parent_job_id = $5 AND ($2 = '' OR status = $2) AND job_id > $3 ORDER BY job_id LIMIT $4`,
			"acme", "", "", 10, "p")
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}))
	require.Contains(t, strings.Join(plan, "\n"), "jobs_forks", strings.Join(plan, "\n"))
}
