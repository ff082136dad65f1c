package episodic_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

func appendOne(t testing.TB, pool *pgxpool.Pool, st *episodic.Store, org, job string, in ...episodic.EventInput) []episodic.Event {
	t.Helper()
	var out []episodic.Event
	require.NoError(t, pg.InOrgTx(context.Background(), pool, org, func(tx pgx.Tx) error {
		var err error
		out, err = st.Append(context.Background(), tx, org, job, in)
		return err
	}))
	return out
}

func inTx[T any](t testing.TB, pool *pgxpool.Pool, org string, f func(tx pgx.Tx) (T, error)) (T, error) {
	t.Helper()
	var out T
	err := pg.InOrgTx(context.Background(), pool, org, func(tx pgx.Tx) error {
		var err error
		out, err = f(tx)
		return err
	})
	return out, err
}

// 16 writers × 500 single-event transactions on one job: seqs are exactly 1..8000.
func TestEventAppendConcurrentGapFree(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	st := episodic.NewStore(episodic.Options{})
	const writers, each = 16, 500
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				err := pg.InOrgTx(context.Background(), pool, "acme", func(tx pgx.Tx) error {
					_, err := st.Append(context.Background(), tx, "acme", "job-1", []episodic.EventInput{
						{Op: "step", Params: json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))}})
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	evs, err := inTx(t, pool, "acme", func(tx pgx.Tx) ([]episodic.Event, error) {
		var all []episodic.Event
		after := int64(0)
		for {
			page, err := st.List(context.Background(), tx, "acme", "job-1", episodic.ListQuery{AfterSeq: after, Limit: 1000})
			if err != nil || len(page) == 0 {
				return all, err
			}
			all = append(all, page...)
			after = page[len(page)-1].Seq
		}
	})
	require.NoError(t, err)
	require.Len(t, evs, writers*each)
	seen := map[string]bool{}
	for i, e := range evs {
		require.Equal(t, int64(i+1), e.Seq)
		seen[string(e.Params)] = true
	}
	require.Len(t, seen, writers*each, "every event stored once")
	h, err := inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Head, error) { return st.Head(context.Background(), tx, "acme", "job-1") })
	require.NoError(t, err)
	require.Equal(t, int64(writers*each), h.LastSeq)
}

// A rolled-back append gives its seqs back: no gap.
func TestEventAppendRollbackLeavesNoGap(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	st := episodic.NewStore(episodic.Options{})
	appendOne(t, pool, st, "acme", "j", episodic.EventInput{Op: "a"})
	err := pg.InOrgTx(context.Background(), pool, "acme", func(tx pgx.Tx) error {
		if _, err := st.Append(context.Background(), tx, "acme", "j", []episodic.EventInput{{Op: "b"}, {Op: "c"}}); err != nil {
			return err
		}
		return fmt.Errorf("abort")
	})
	require.Error(t, err)
	evs := appendOne(t, pool, st, "acme", "j", episodic.EventInput{Op: "d"})
	require.Equal(t, int64(2), evs[0].Seq)
}

// The log is append-only in the database: UPDATE, DELETE and TRUNCATE are refused, even
// for the table's owner, unless the transaction opts in as erasure/retention do.
func TestEventAppendOnlyTrigger(t *testing.T) {
	t.Parallel()
	pool, dsn := testenv.Pool(t)
	st := episodic.NewStore(episodic.Options{})
	appendOne(t, pool, st, "acme", "j", episodic.EventInput{Op: "a", UserID: "u1"}, episodic.EventInput{Op: "b"})
	ctx := context.Background()

	// As the request role.
	err := pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE episodic_events SET op = 'x' WHERE org_id = 'acme'`)
		return err
	})
	require.ErrorContains(t, err, "append-only")
	err = pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM episodic_events WHERE org_id = 'acme'`)
		return err
	})
	require.ErrorContains(t, err, "append-only")

	// As the owner.
	owner := testenv.OwnerConn(t, dsn)
	_, err = owner.Exec(ctx, `DELETE FROM episodic_events`)
	require.ErrorContains(t, err, "append-only")
	_, err = owner.Exec(ctx, `TRUNCATE episodic_events`)
	require.ErrorContains(t, err, "append-only")
	_, err = owner.Exec(ctx, `UPDATE episodic_events SET params = '{}'`)
	require.ErrorContains(t, err, "append-only")

	// Erasure opts in for its own transaction only.
	err = pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL strata.allow_event_delete = 'on'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE episodic_events SET params = '{}', user_id = NULL WHERE org_id = 'acme' AND user_id = 'u1'`)
		return err
	})
	require.NoError(t, err)
	err = pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM episodic_events WHERE org_id = 'acme'`)
		return err
	})
	require.ErrorContains(t, err, "append-only", "the opt-in does not outlive its transaction")
	var n int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM episodic_events`).Scan(&n))
	require.Equal(t, 2, n)
}

// A fork sees its parent's events up to the fork point, continues the seqs after it, and
// its writes (appends, reverts) never show in the parent.
func TestEventForkView(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	st := episodic.NewStore(episodic.Options{})
	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		appendOne(t, pool, st, "acme", "parent", episodic.EventInput{Op: "edit", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	}
	h, err := inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Head, error) {
		return st.Fork(ctx, tx, "acme", "parent", "child", 3)
	})
	require.NoError(t, err)
	require.Equal(t, episodic.Head{JobID: "child", LastSeq: 3, ParentJobID: "parent", ParentSeq: 3, CreatedAt: h.CreatedAt}, h)
	// Forking again the same way is idempotent; another way conflicts.
	_, err = inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Head, error) { return st.Fork(ctx, tx, "acme", "parent", "child", 3) })
	require.NoError(t, err)
	_, err = inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Head, error) { return st.Fork(ctx, tx, "acme", "parent", "child", 2) })
	require.ErrorIs(t, err, strata.ErrConflict)
	_, err = inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Head, error) { return st.Fork(ctx, tx, "acme", "parent", "c2", 6) })
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)

	evs := appendOne(t, pool, st, "acme", "child", episodic.EventInput{Op: "edit", Params: json.RawMessage(`{"n":"c4"}`)})
	require.Equal(t, int64(4), evs[0].Seq)

	list := func(job string) []string {
		evs, err := inTx(t, pool, "acme", func(tx pgx.Tx) ([]episodic.Event, error) {
			return st.List(ctx, tx, "acme", job, episodic.ListQuery{Limit: 100})
		})
		require.NoError(t, err)
		var out []string
		for _, e := range evs {
			out = append(out, fmt.Sprintf("%s/%d/%s", e.JobID, e.Seq, e.Params))
		}
		return out
	}
	require.Equal(t, []string{`parent/1/{"n": 1}`, `parent/2/{"n": 2}`, `parent/3/{"n": 3}`, `child/4/{"n": "c4"}`}, list("child"))
	require.Len(t, list("parent"), 5)

	// Last N spans the fork point.
	last, err := inTx(t, pool, "acme", func(tx pgx.Tx) ([]episodic.Event, error) { return st.Last(ctx, tx, "acme", "child", 2) })
	require.NoError(t, err)
	require.Equal(t, []int64{3, 4}, []int64{last[0].Seq, last[1].Seq})

	// A fork of a fork.
	_, err = inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Head, error) { return st.Fork(ctx, tx, "acme", "child", "grandchild", 4) })
	require.NoError(t, err)
	appendOne(t, pool, st, "acme", "grandchild", episodic.EventInput{Op: "edit", Params: json.RawMessage(`{"n":"g5"}`)})
	require.Equal(t, []string{`parent/1/{"n": 1}`, `parent/2/{"n": 2}`, `parent/3/{"n": 3}`, `child/4/{"n": "c4"}`, `grandchild/5/{"n": "g5"}`}, list("grandchild"))
	// ... and ListQuery.ThroughSeq reads a view up to a seq.
	upTo, err := inTx(t, pool, "acme", func(tx pgx.Tx) ([]episodic.Event, error) {
		return st.List(ctx, tx, "acme", "grandchild", episodic.ListQuery{AfterSeq: 1, ThroughSeq: 4, Limit: 100})
	})
	require.NoError(t, err)
	require.Len(t, upTo, 3)

	// Reverting a parent event in the fork: not applied in the fork, still applied in the parent.
	fp, _ := episodic.Fingerprint("edit", []byte(`{"n":2}`))
	fpb, _ := episodic.ParseFingerprint(fp)
	rev, err := inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Event, error) {
		e, _, err := st.Revert(ctx, tx, "acme", "child", 2, episodic.RevertInput{Reason: "bad"})
		return e, err
	})
	require.NoError(t, err)
	require.Equal(t, int64(5), rev.Seq)
	require.Equal(t, "child", rev.JobID)
	applied := func(job string) bool {
		e, err := inTx(t, pool, "acme", func(tx pgx.Tx) (*episodic.Event, error) { return st.Applied(ctx, tx, "acme", job, fpb) })
		require.NoError(t, err)
		return e != nil
	}
	require.False(t, applied("child"))
	require.True(t, applied("parent"))
	require.True(t, applied("grandchild"), "the grandchild forked before the revert")
	require.False(t, applied("nope"))
}
