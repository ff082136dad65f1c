package episodic_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// QueueLast (one statement in a caller's batch) answers exactly what Last and Head do,
// through fork lineages, for every n, and for a job without a log.
func TestQueueLastMatchesLastThroughForks(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	ctx := context.Background()
	st := episodic.NewStore(episodic.Options{})
	appendN := func(job string, n int) {
		for i := range n {
			require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
				_, err := st.Append(ctx, tx, "acme", job, []episodic.EventInput{{Op: "op", Params: json.RawMessage(fmt.Sprintf(`{"%s":%d}`, job, i))}})
				return err
			}))
		}
	}
	fork := func(parent, child string, at int64) {
		require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
			_, err := st.Fork(ctx, tx, "acme", parent, child, at)
			return err
		}))
	}
	appendN("root", 6)
	fork("root", "child", 4)
	appendN("child", 2)
	fork("child", "grand", 5)
	appendN("grand", 3)
	fork("root", "bare", 3) // a fork with no events of its own

	for _, job := range []string{"root", "child", "grand", "bare", "none"} {
		for _, n := range []int{1, 2, 5, 9, 100} {
			require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
				want, werr := st.Last(ctx, tx, "acme", job, n)
				head, herr := st.Head(ctx, tx, "acme", job)
				var got episodic.LastResult
				b := &pgx.Batch{}
				st.QueueLast(b, "acme", job, n, &got)
				require.NoError(t, tx.SendBatch(ctx, b).Close())
				require.NoError(t, got.Err)
				if job == "none" {
					require.Error(t, werr)
					require.Error(t, herr)
					require.False(t, got.HasLog)
					require.Empty(t, got.Events)
					return nil
				}
				require.NoError(t, werr)
				require.NoError(t, herr)
				require.True(t, got.HasLog)
				require.Equal(t, head, got.Head, job)
				require.Equal(t, len(want), len(got.Events), "%s n=%d", job, n)
				for i := range want {
					require.Equal(t, want[i].JobID, got.Events[i].JobID)
					require.Equal(t, want[i].Seq, got.Events[i].Seq)
					require.JSONEq(t, string(want[i].Params), string(got.Events[i].Params))
				}
				return nil
			}))
		}
	}
}

// TestForkWalkReadsParentsByKey: the fork walks (QueueLast's statement, as resume queues it
// under generic plans, and view's, under Last) read each parent by key, even with the plans a
// connection built while episodic_jobs held two rows. As a join, those plans read every job of
// the org at each step of the walk, the last one too (finding no parent): here 2,004 and
// 2,003 rows for a fork of one job in a 2,002-job org; now 3 and 2.
func TestForkWalkReadsParentsByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.Pool(t)
	one := testenv.OnePool(t, dsn)
	st := episodic.NewStore(episodic.Options{})
	const org = "forkwalk"
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		if _, err := st.Append(ctx, tx, org, "root", []episodic.EventInput{{Op: "cut"}, {Op: "grade"}}); err != nil {
			return err
		}
		_, err := st.Fork(ctx, tx, org, "root", "fork", 2)
		return err
	}))
	// walk reads fork's last events both ways on the one connection (QueueLast under generic
	// plans, as resume sends it; then Last) and counts the episodic_jobs rows read.
	walk := func() (queued, last int) {
		require.NoError(t, pg.InOrgTx(ctx, one, org, func(tx pgx.Tx) error {
			var got episodic.LastResult
			var err error
			queued, err = testenv.RowsRead(ctx, tx, "episodic_jobs", func() error {
				b := &pgx.Batch{}
				b.Queue(pg.GenericPlansSQL)
				st.QueueLast(b, org, "fork", 10, &got)
				b.Queue(pg.DefaultPlansSQL)
				return tx.SendBatch(ctx, b).Close()
			})
			if err != nil {
				return err
			}
			require.NoError(t, got.Err)
			require.Len(t, got.Events, 2, "the fork's view holds its parent's two events")
			last, err = testenv.RowsRead(ctx, tx, "episodic_jobs", func() error {
				evs, err := st.Last(ctx, tx, org, "fork", 10)
				require.Len(t, evs, 2)
				return err
			})
			return err
		}))
		return queued, last
	}
	for range 6 { // past the five custom plans after which a plain statement may go generic
		walk()
	}
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO episodic_jobs (org_id, job_id) SELECT $1, 'bulk-' || g FROM generate_series(1, 2000) g`, org)
		return err
	}))
	queued, last := walk()
	t.Logf("episodic_jobs rows read: QueueLast %d, Last %d", queued, last)
	// The walk's two jobs, and QueueLast's head read (Last reads the head in its walk).
	require.LessOrEqual(t, queued, 4, "episodic_jobs rows QueueLast read")
	require.LessOrEqual(t, last, 4, "episodic_jobs rows Last read")
}
