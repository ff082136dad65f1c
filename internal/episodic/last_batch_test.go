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
