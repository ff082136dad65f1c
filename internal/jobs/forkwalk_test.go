package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestResumeWalksForksByKey: resume's fork walk (lineageCTE) reads each parent by key, even
// under the generic plan a connection built on its first resume, while jobs held two rows.
// As a join, that plan read every job of the org at each step of the walk, the last step
// too (finding no parent): here 4,007 rows for a fork of one job in a 2,002-job org; now 4.
func TestResumeWalksForksByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.Pool(t)
	one := testenv.OnePool(t, dsn)
	store := jobs.NewStore(15*time.Minute, time.Now)
	const org = "forkwalk"
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		if _, _, err := store.PutJob(ctx, tx, org, "root", jobs.JobSpec{}, nil); err != nil {
			return err
		}
		if _, err := store.PutCheckpoint(ctx, tx, org, "root", jobs.CheckpointInput{NextAction: "cut the trailer"}, nil); err != nil {
			return err
		}
		_, _, err := store.Fork(ctx, tx, org, "root", 1, jobs.ForkInput{NewJobID: "fork"})
		return err
	}))
	// resume reads fork's resume view on the one connection and counts the job rows it read.
	resume := func() (jobs.Resume, int) {
		var r jobs.Resume
		var read int
		require.NoError(t, pg.InOrgTx(ctx, one, org, func(tx pgx.Tx) error {
			var err error
			read, err = testenv.RowsRead(ctx, tx, "jobs", func() error {
				r, err = store.Resume(ctx, tx, org, "fork")
				return err
			})
			return err
		}))
		return r, read
	}
	resume() // the connection's plans, on a table of two jobs
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO jobs (org_id, job_id, goal, status, owner, metadata, checkpoint_version,
				progress_at, created_at, updated_at)
			SELECT $1, 'bulk-' || g, '', 'running', '', '{}', 0, now(), now(), now() FROM generate_series(1, 2000) g`, org)
		return err
	}))
	r, read := resume()
	require.NotNil(t, r.Checkpoint)
	require.Equal(t, "cut the trailer", r.Checkpoint.NextAction, "the fork's checkpoint comes from its parent")
	t.Logf("job rows one resume read: %d", read)
	// The job itself, and each job of the walk (the fork and its parent).
	require.LessOrEqual(t, read, 6, "job rows one resume read")
	require.Positive(t, read)
}
