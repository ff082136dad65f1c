package episodic

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestAppliedReadsTheJobsIndexRange measures the buffers one "was this edit applied?" reads
// (Store.Applied, GET /v1/jobs/{job}/applied) with the plan a connection settles on after
// its first executions, built while the org held three events, then again once the org
// holds 2,000 more in another job: they must not grow with the org's log (with the segments
// joined to the events instead of read laterally: 8 buffers, then 34; laterally 13, then
// 17). The statement before this one took the view's segments as arrays and joined them to
// the events; its generic plan looked the fingerprint up by (org, fingerprint) over the
// org's whole index range, so its cost grew with the org's log (392 buffers for one lookup
// in a 28,002-event org against 9 now, on a load test's database). Now each segment of the
// walk is read by (org, job, fingerprint) in a lateral subquery.
func TestAppliedReadsTheJobsIndexRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.Pool(t)
	one := testenv.OnePool(t, dsn)
	st := NewStore(Options{})
	const org = "appliedplan"
	var grade Event
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		evs, err := st.Append(ctx, tx, org, "root", []EventInput{{Op: "cut"}, {Op: "grade"}})
		if err != nil {
			return err
		}
		grade = evs[1]
		if _, err := st.Fork(ctx, tx, org, "root", "fork", 2); err != nil {
			return err
		}
		_, err = st.Append(ctx, tx, org, "fork", []EventInput{{Op: "export"}})
		return err
	}))
	fp, ok := ParseFingerprint(grade.Fingerprint)
	require.True(t, ok)
	// The pool's one connection: the statement is prepared on it, as pgx prepares it.
	conn, err := one.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE applied(text, text, int, bytea) AS `+appliedSQL)
	conn.Release()
	require.NoError(t, err)
	// run executes the prepared statement in an org-bound transaction (row-level security
	// applies, as for a request), EXPLAINed when explain is set: the buffers it read.
	// EXECUTE takes no bind parameters: the values are literals (constants of this test).
	exec := fmt.Sprintf(`EXECUTE applied('%s', 'fork', %d, '\x%x')`, org, MaxForkDepth, fp)
	run := func(explain bool) int {
		var buffers int
		require.NoError(t, pg.InOrgTx(ctx, one, org, func(tx pgx.Tx) error {
			if !explain {
				e, err := scanEvent(tx.QueryRow(ctx, exec))
				require.NoError(t, err)
				require.EqualValues(t, 2, e.Seq, "the fork's view holds its parent's grade")
				return nil
			}
			var plan []struct {
				Plan struct {
					Rows int64 `json:"Actual Rows"`
					Hit  int   `json:"Shared Hit Blocks"`
					Read int   `json:"Shared Read Blocks"`
				} `json:"Plan"`
			}
			var raw []byte
			if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+exec).Scan(&raw); err != nil {
				return err
			}
			require.NoError(t, json.Unmarshal(raw, &plan))
			require.EqualValues(t, 1, plan[0].Plan.Rows)
			buffers = plan[0].Plan.Hit + plan[0].Plan.Read
			return nil
		}))
		return buffers
	}
	for range 6 { // past the five custom plans after which a statement may go generic
		run(false)
	}
	base := run(true)
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		for b := range 20 {
			in := make([]EventInput, 100)
			for i := range in {
				in[i] = EventInput{Op: "render", Params: json.RawMessage(fmt.Sprintf(`{"frame":%d}`, b*100+i))}
			}
			if _, err := st.Append(ctx, tx, org, "bulk", in); err != nil {
				return err
			}
		}
		return nil
	}))
	n := run(true)
	t.Logf("buffers one Applied read: %d with 3 events in the org, %d with 2,003", base, n)
	// Each of the four index lookups (two segments, the event and a revert of it) descends
	// one level deeper into an index of 2,003 entries than into one of 3: 4 buffers more.
	require.LessOrEqual(t, n, base+6, "buffers one Applied read once the org grew")
}
