package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

type env struct {
	t     *testing.T
	pool  *pgxpool.Pool
	store *jobs.Store
	clk   *testenv.Clock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool, _ := testenv.Pool(t)
	clk := testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	return &env{t: t, pool: pool, store: jobs.NewStore(15*time.Minute, clk.Now), clk: clk}
}

// tx runs fn in a transaction of org; fn's error rolls back and is returned.
func (e *env) tx(org string, fn func(tx pgx.Tx) error) error {
	return pg.InOrgTx(context.Background(), e.pool, org, fn)
}

func (e *env) job(org, id string, spec jobs.JobSpec) jobs.Job {
	e.t.Helper()
	var j jobs.Job
	require.NoError(e.t, e.tx(org, func(tx pgx.Tx) error {
		var err error
		j, _, err = e.store.PutJob(context.Background(), tx, org, id, spec, nil)
		return err
	}))
	return j
}

func (e *env) start(org, job, step, owner string, lease int) (jobs.Claim, error) {
	var c jobs.Claim
	err := e.tx(org, func(tx pgx.Tx) error {
		var err error
		c, err = e.store.Start(context.Background(), tx, org, job, step, jobs.StartInput{Owner: owner, LeaseSeconds: lease,
			Input: jobs.StepInput{Tool: "ffmpeg", Params: json.RawMessage(`{"crop":[0,0,100,100]}`)}})
		return err
	})
	return c, err
}

func (e *env) complete(org, job, step string, token int64, result string) (jobs.Step, error) {
	var st jobs.Step
	err := e.tx(org, func(tx pgx.Tx) error {
		var err error
		st, err = e.store.Complete(context.Background(), tx, org, job, step, token, json.RawMessage(result))
		return err
	})
	return st, err
}

func (e *env) fail(org, job, step string, token int64, disp string) (jobs.Step, error) {
	var st jobs.Step
	err := e.tx(org, func(tx pgx.Tx) error {
		var err error
		st, err = e.store.Fail(context.Background(), tx, org, job, step, token, "boom", disp)
		return err
	})
	return st, err
}

func (e *env) heartbeat(org, job, step string, token int64) (jobs.Step, error) {
	var st jobs.Step
	err := e.tx(org, func(tx pgx.Tx) error {
		var err error
		st, err = e.store.Heartbeat(context.Background(), tx, org, job, step, token, 0)
		return err
	})
	return st, err
}

func requireConflict(t *testing.T, err error) *strata.ConflictError {
	t.Helper()
	var ce *strata.ConflictError
	require.True(t, errors.As(err, &ce), "want a conflict, got %v", err)
	return ce
}

func TestStepLeaseExpiryAndTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.job("acme", "j1", jobs.JobSpec{Goal: "cut the video"})

	c1, err := e.start("acme", "j1", "cut", "agent-a", 30)
	require.NoError(t, err)
	require.Equal(t, jobs.ClaimClaimed, c1.Status)
	require.EqualValues(t, 1, c1.FencingToken)
	require.Equal(t, 1, c1.Attempt)
	require.Equal(t, e.clk.Now().Add(30*time.Second), *c1.LeaseExpiresAt)

	// The holder asking again gets the same claim (idempotent), not a new token.
	again, err := e.start("acme", "j1", "cut", "agent-a", 30)
	require.NoError(t, err)
	require.Equal(t, c1.FencingToken, again.FencingToken)
	require.Equal(t, 1, again.Attempt)

	// Another owner while the lease is live: 409 naming holder and until.
	_, err = e.start("acme", "j1", "cut", "agent-b", 30)
	ce := requireConflict(t, err)
	require.Equal(t, "agent-a", ce.Details["holder"])
	require.Equal(t, e.clk.Now().Add(30*time.Second), ce.Details["until"])

	// Heartbeat extends the lease.
	e.clk.Advance(20 * time.Second)
	hb, err := e.heartbeat("acme", "j1", "cut", c1.FencingToken)
	require.NoError(t, err)
	require.Equal(t, e.clk.Now().Add(30*time.Second), hb.LeaseExpiresAt)
	e.clk.Advance(20 * time.Second)
	_, err = e.start("acme", "j1", "cut", "agent-b", 30)
	requireConflict(t, err) // still live thanks to the heartbeat

	// Expired: agent-b takes over with a greater token and a new attempt.
	e.clk.Advance(11 * time.Second)
	c2, err := e.start("acme", "j1", "cut", "agent-b", 30)
	require.NoError(t, err)
	require.Equal(t, jobs.ClaimClaimed, c2.Status)
	require.Greater(t, c2.FencingToken, c1.FencingToken)
	require.Equal(t, 2, c2.Attempt)

	// agent-a's token is stale now: heartbeat, complete and fail are refused, nothing written.
	_, err = e.heartbeat("acme", "j1", "cut", c1.FencingToken)
	requireConflict(t, err)
	_, err = e.complete("acme", "j1", "cut", c1.FencingToken, `{"by":"a"}`)
	ce = requireConflict(t, err)
	require.Equal(t, "agent-b", ce.Details["holder"])
	_, err = e.fail("acme", "j1", "cut", c1.FencingToken, jobs.DispositionRetryable)
	requireConflict(t, err)

	st, err := e.complete("acme", "j1", "cut", c2.FencingToken, `{"by":"b"}`)
	require.NoError(t, err)
	require.Equal(t, jobs.StepCompleted, st.Status)
	require.JSONEq(t, `{"by":"b"}`, string(st.Result))
	// Completing again with the same token (a retry after a lost response) answers the same.
	st2, err := e.complete("acme", "j1", "cut", c2.FencingToken, `{"by":"other"}`)
	require.NoError(t, err)
	require.JSONEq(t, `{"by":"b"}`, string(st2.Result))

	// Started again: completed with the stored result, nothing claimed.
	c3, err := e.start("acme", "j1", "cut", "agent-c", 30)
	require.NoError(t, err)
	require.Equal(t, jobs.ClaimCompleted, c3.Status)
	require.Equal(t, c2.FencingToken, c3.FencingToken)
	require.JSONEq(t, `{"by":"b"}`, string(c3.Result))
	require.Nil(t, c3.LeaseExpiresAt)
}

func TestStepFailureDispositions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.job("acme", "j1", jobs.JobSpec{})

	c1, err := e.start("acme", "j1", "s", "a", 10)
	require.NoError(t, err)
	st, err := e.fail("acme", "j1", "s", c1.FencingToken, jobs.DispositionRetryable)
	require.NoError(t, err)
	require.Equal(t, jobs.StepFailed, st.Status)
	require.JSONEq(t, `{"tool":"ffmpeg","params":{"crop":[0,0,100,100]}}`, string(st.Input), "the failure shows its input")

	c2, err := e.start("acme", "j1", "s", "a", 10)
	require.NoError(t, err)
	require.Equal(t, 2, c2.Attempt)
	require.Greater(t, c2.FencingToken, c1.FencingToken)
	_, err = e.fail("acme", "j1", "s", c2.FencingToken, jobs.DispositionManualReview)
	require.NoError(t, err)

	// manual_review: not restartable until cleared.
	_, err = e.start("acme", "j1", "s", "a", 10)
	ce := requireConflict(t, err)
	require.Equal(t, jobs.DispositionManualReview, ce.Details["disposition"])
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		st, err := e.store.ClearStep(context.Background(), tx, "acme", "j1", "s", "operator-1")
		require.Equal(t, jobs.DispositionRetryable, st.Disposition)
		require.Equal(t, "operator-1", st.ClearedBy)
		return err
	}))
	c3, err := e.start("acme", "j1", "s", "a", 10)
	require.NoError(t, err)
	require.Equal(t, 3, c3.Attempt)
	require.Greater(t, c3.FencingToken, c2.FencingToken)

	// Unknown disposition: field error, nothing written.
	_, err = e.fail("acme", "j1", "s", c3.FencingToken, "shrug")
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "disposition", fe.Field)
	var got jobs.Step
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		got, err = e.store.GetStep(context.Background(), tx, "acme", "j1", "s")
		return err
	}))
	require.Equal(t, jobs.StepRunning, got.Status)
}

func TestFencingTokensStrictlyIncreaseUnderContention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.job("acme", "j1", jobs.JobSpec{})
	// 8 owners race for the step many times; leases expire between rounds.
	var last int64
	for round := 0; round < 5; round++ {
		var wg sync.WaitGroup
		tokens := make(chan int64, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := e.start("acme", "j1", "s", fmt.Sprintf("o%d-%d", round, i), 5)
				if err == nil {
					tokens <- c.FencingToken
				} else {
					requireConflict(t, err)
				}
			}()
		}
		wg.Wait()
		close(tokens)
		var got []int64
		for tok := range tokens {
			got = append(got, tok)
		}
		require.Len(t, got, 1, "exactly one owner wins each round")
		require.Greater(t, got[0], last)
		last = got[0]
		e.clk.Advance(6 * time.Second)
	}
}

func TestCheckpointIfMatchRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.job("acme", "j1", jobs.JobSpec{})
	for v := int64(0); v < 4; v++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := e.tx("acme", func(tx pgx.Tx) error {
					_, err := e.store.PutCheckpoint(context.Background(), tx, "acme", "j1",
						jobs.CheckpointInput{NextAction: fmt.Sprint("writer ", i)}, &v)
					return err
				})
				if err == nil {
					mu.Lock()
					wins++
					mu.Unlock()
					return
				}
				ce := requireConflict(t, err)
				require.EqualValues(t, v+1, ce.Details["current_version"])
			}()
		}
		wg.Wait()
		require.Equal(t, 1, wins, "exactly one writer wins version %d", v+1)
	}
	var n int
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		return tx.QueryRow(context.Background(), `SELECT count(*) FROM job_checkpoints WHERE job_id = 'j1'`).Scan(&n)
	}))
	require.Equal(t, 4, n)
}

func TestForkIsolationAndLineage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.job("acme", "p", jobs.JobSpec{Goal: "edit", Owner: "a"})
	put := func(job, next string) jobs.Checkpoint {
		var c jobs.Checkpoint
		require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
			var err error
			c, err = e.store.PutCheckpoint(ctx, tx, "acme", job, jobs.CheckpointInput{NextAction: next, EventSeq: int64(len(next))}, nil)
			return err
		}))
		return c
	}
	c, err := e.start("acme", "p", "s1", "a", 30)
	require.NoError(t, err)
	_, err = e.complete("acme", "p", "s1", c.FencingToken, `"one"`)
	require.NoError(t, err)
	e.clk.Advance(time.Second)
	put("p", "v1")
	put("p", "v2..")
	e.clk.Advance(time.Second)
	c, err = e.start("acme", "p", "s2", "a", 30)
	require.NoError(t, err)
	_, err = e.complete("acme", "p", "s2", c.FencingToken, `"two"`)
	require.NoError(t, err)
	e.clk.Advance(time.Second)
	put("p", "v3")

	var fork jobs.Job
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		var cp jobs.Checkpoint
		var err error
		fork, cp, err = e.store.Fork(ctx, tx, "acme", "p", 2, jobs.ForkInput{NewJobID: "f"})
		require.Equal(t, "v2..", cp.NextAction)
		return err
	}))
	require.Equal(t, "p", fork.ParentJobID)
	require.EqualValues(t, 2, fork.ParentVersion)
	require.EqualValues(t, 4, fork.ParentEventSeq) // len("v2..")
	require.EqualValues(t, 2, fork.CheckpointVersion)
	require.Equal(t, "a", fork.Owner)

	// The fork writes version 3 of its own history; the parent's version 3 is untouched.
	require.Equal(t, "f3", put("f", "f3").NextAction)
	put("f", "f4")
	get := func(job string, v int64) jobs.Checkpoint {
		var cp jobs.Checkpoint
		require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
			var err error
			cp, err = e.store.GetCheckpoint(ctx, tx, "acme", job, v)
			return err
		}))
		return cp
	}
	require.Equal(t, "v3", get("p", 3).NextAction)
	require.Equal(t, "v3", get("p", 0).NextAction)
	require.Equal(t, "f3", get("f", 3).NextAction)
	require.Equal(t, "f4", get("f", 0).NextAction)
	require.Equal(t, "v1", get("f", 1).NextAction)
	require.Equal(t, "p", get("f", 1).StoredIn, "shared, not copied")
	var list []jobs.CheckpointSummary
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		list, err = e.store.ListCheckpoints(ctx, tx, "acme", "f", "", false, 100)
		return err
	}))
	var where []string
	for _, c := range list {
		where = append(where, fmt.Sprint(c.Version, c.StoredIn))
	}
	require.Equal(t, []string{"1p", "2p", "3f", "4f"}, where)
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		list, err = e.store.ListCheckpoints(ctx, tx, "acme", "p", "", true, 100)
		return err
	}))
	require.Len(t, list, 3, "the fork's writes never show in the parent")
	require.EqualValues(t, 3, list[0].Version)

	// A fork of the fork at a shared version walks two levels up.
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		_, _, err := e.store.Fork(ctx, tx, "acme", "f", 1, jobs.ForkInput{NewJobID: "g"})
		return err
	}))
	require.Equal(t, "v1", get("g", 0).NextAction)
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		list, err = e.store.ListCheckpoints(ctx, tx, "acme", "g", "", false, 100)
		return err
	}))
	require.Len(t, list, 1)

	// Steps completed at the fork point come along; later ones do not.
	c, err = e.start("acme", "f", "s1", "a", 30)
	require.NoError(t, err)
	require.Equal(t, jobs.ClaimCompleted, c.Status)
	require.JSONEq(t, `"one"`, string(c.Result))
	c, err = e.start("acme", "f", "s2", "a", 30)
	require.NoError(t, err)
	require.Equal(t, jobs.ClaimClaimed, c.Status)
	_, err = e.complete("acme", "f", "s2", c.FencingToken, `"fork-two"`)
	require.NoError(t, err)
	var ps jobs.Step
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		ps, err = e.store.GetStep(ctx, tx, "acme", "p", "s2")
		return err
	}))
	require.JSONEq(t, `"two"`, string(ps.Result), "the fork's step never shows in the parent")

	// Bad forks: unknown version → 404 field error; existing new id → conflict.
	err = e.tx("acme", func(tx pgx.Tx) error {
		_, _, err := e.store.Fork(ctx, tx, "acme", "p", 9, jobs.ForkInput{NewJobID: "h"})
		return err
	})
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "version", fe.Field)
	require.Equal(t, strata.FieldNotFound, fe.Kind)
	err = e.tx("acme", func(tx pgx.Tx) error {
		_, _, err := e.store.Fork(ctx, tx, "acme", "p", 1, jobs.ForkInput{NewJobID: "f"})
		return err
	})
	requireConflict(t, err)
}

func TestHandoffAckMovesOwnershipAndFencesOldHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.job("acme", "j", jobs.JobSpec{Owner: "a"})
	c, err := e.start("acme", "j", "s", "a", 60)
	require.NoError(t, err)
	_, err = e.start("acme", "j", "s2", "b", 60)
	requireConflict(t, err) // b is not the owner

	var h jobs.Handoff
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		var created bool
		h, created, err = e.store.CreateHandoff(ctx, tx, "acme", "j", jobs.HandoffInput{From: "a", To: "b", Context: json.RawMessage(`{"note":"take over"}`)})
		require.True(t, created)
		return err
	}))
	// A re-send (no id, same from/to) is the same handoff.
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		h2, created, err := e.store.CreateHandoff(ctx, tx, "acme", "j", jobs.HandoffInput{From: "a", To: "b"})
		require.False(t, created)
		require.Equal(t, h.ID, h2.ID)
		require.Equal(t, 2, h2.SentCount)
		return err
	}))
	// Another handoff while one is pending → conflict.
	err = e.tx("acme", func(tx pgx.Tx) error {
		_, _, err := e.store.CreateHandoff(ctx, tx, "acme", "j", jobs.HandoffInput{From: "a", To: "c"})
		return err
	})
	requireConflict(t, err)

	// Concurrent acks by the receiver and a stranger: the receiver's all succeed with one
	// outcome; the stranger's are refused.
	var wg sync.WaitGroup
	var mu sync.Mutex
	owners := map[string]int{}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := "b"
			if i%2 == 1 {
				agent = "c"
			}
			err := e.tx("acme", func(tx pgx.Tx) error {
				_, j, err := e.store.AckHandoff(ctx, tx, "acme", "j", h.ID, agent)
				if err == nil {
					mu.Lock()
					owners[j.Owner]++
					mu.Unlock()
				}
				return err
			})
			if agent == "c" {
				requireConflict(t, err)
			} else {
				require.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, map[string]int{"b": 4}, owners)

	// The old holder is fenced; the new owner re-starts and gets the moved claim.
	_, err = e.complete("acme", "j", "s", c.FencingToken, `1`)
	requireConflict(t, err)
	_, err = e.start("acme", "j", "s", "a", 60)
	requireConflict(t, err)
	c2, err := e.start("acme", "j", "s", "b", 60)
	require.NoError(t, err)
	require.Greater(t, c2.FencingToken, c.FencingToken)
	_, err = e.complete("acme", "j", "s", c2.FencingToken, `1`)
	require.NoError(t, err)

	var r jobs.Resume
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		r, err = e.store.Resume(ctx, tx, "acme", "j")
		return err
	}))
	require.Empty(t, r.PendingHandoffs)
	require.Equal(t, "b", r.Job.Owner)
}

func TestResumeAndStalled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.job("acme", "j", jobs.JobSpec{Goal: "g"})
	e.job("acme", "quiet", jobs.JobSpec{Goal: "q"})
	e.job("acme", "done", jobs.JobSpec{Goal: "d"})
	for i := 1; i <= 3; i++ {
		c, err := e.start("acme", "j", fmt.Sprint("s", i), "a", 60)
		require.NoError(t, err)
		_, err = e.complete("acme", "j", fmt.Sprint("s", i), c.FencingToken, fmt.Sprint(i))
		require.NoError(t, err)
		e.clk.Advance(time.Second)
	}
	c, err := e.start("acme", "j", "s4", "a", 60)
	require.NoError(t, err)
	_, err = e.fail("acme", "j", "s4", c.FencingToken, jobs.DispositionManualReview)
	require.NoError(t, err)
	_, err = e.start("acme", "j", "s5", "a", 60)
	require.NoError(t, err)
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		_, err := e.store.PutCheckpoint(ctx, tx, "acme", "j", jobs.CheckpointInput{NextAction: "run s5",
			WorkingState: json.RawMessage(`{"cursor":4}`)}, nil)
		return err
	}))
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		_, err := e.store.CompleteJob(ctx, tx, "acme", "done", "", json.RawMessage(`{"ok":true}`), 0)
		return err
	}))

	var r jobs.Resume
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		r, err = e.store.Resume(ctx, tx, "acme", "j")
		return err
	}))
	require.Equal(t, "run s5", r.NextAction)
	require.JSONEq(t, `{"cursor":4}`, string(r.WorkingState))
	require.Len(t, r.CompletedSteps, 3)
	require.Equal(t, "s1", r.CompletedSteps[0].StepID)
	require.Len(t, r.FailedSteps, 1)
	require.Equal(t, jobs.DispositionManualReview, r.FailedSteps[0].Disposition)
	require.Len(t, r.InFlight, 1)
	require.Equal(t, "live", r.InFlight[0].Lease)

	stalled := func() []jobs.JobListItem {
		var items []jobs.JobListItem
		require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
			items, err = e.store.ListJobs(ctx, tx, "acme", jobs.ListFilter{Stalled: true, Limit: 100})
			return err
		}))
		return items
	}
	require.Empty(t, stalled())
	e.clk.Advance(61 * time.Second)
	items := stalled()
	require.Len(t, items, 1)
	require.Equal(t, "j", items[0].JobID)
	require.Equal(t, "lease_expired", items[0].Stalled.Reason)
	require.Equal(t, "s5", items[0].Stalled.StepID)
	require.JSONEq(t, `{"tool":"ffmpeg","params":{"crop":[0,0,100,100]}}`, string(items[0].Stalled.Input))

	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		r, err = e.store.Resume(ctx, tx, "acme", "j")
		return err
	}))
	require.Equal(t, "expired", r.InFlight[0].Lease)

	e.clk.Advance(15 * time.Minute)
	items = stalled()
	require.Len(t, items, 2)
	require.Equal(t, "quiet", items[1].JobID)
	require.Equal(t, "no_progress", items[1].Stalled.Reason)

	le, np, err := e.store.StalledCounts(ctx, e.pool)
	require.NoError(t, err)
	require.EqualValues(t, 1, le)
	require.EqualValues(t, 1, np)

	// The finished job enqueued its consolidation once.
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		_, err := e.store.CompleteJob(ctx, tx, "acme", "done", jobs.StatusCompleted, nil, 0)
		require.NoError(t, err)
		ob, err := e.store.Outbox(ctx, tx, "acme", "done")
		require.Len(t, ob, 1)
		require.Equal(t, jobs.OutboxKindConsolidate, ob[0].Kind)
		require.Equal(t, "completed", ob[0].Payload.Status)
		return err
	}))
	// ... and refuses work now.
	_, err = e.start("acme", "done", "x", "a", 10)
	requireConflict(t, err)
}

func TestTenantIsolationInStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.job("org-a", "j", jobs.JobSpec{Goal: "secret"})
	err := e.tx("org-b", func(tx pgx.Tx) error {
		_, err := e.store.GetJob(context.Background(), tx, "org-b", "j")
		return err
	})
	require.ErrorIs(t, err, strata.ErrNotFound)
	_, err = e.start("org-b", "j", "s", "a", 10)
	require.ErrorIs(t, err, strata.ErrNotFound)
	// Even naming org-a while bound to org-b sees nothing (row-level security).
	err = e.tx("org-b", func(tx pgx.Tx) error {
		_, err := e.store.GetJob(context.Background(), tx, "org-a", "j")
		return err
	})
	require.ErrorIs(t, err, strata.ErrNotFound)
}

// TestStepsListInRunOrder: a job's steps list in the order they were first claimed, not by
// name; a retry keeps its step's place; the cursor pages on in that order (issue 46).
func TestStepsListInRunOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.job("acme", "run", jobs.JobSpec{Goal: "g"})
	var firstZ jobs.Claim
	for i, step := range []string{"zeta-fetch", "alpha-cut", "mid-grade", "beta-export"} {
		c, err := e.start("acme", "run", step, "w1", 60)
		require.NoError(t, err)
		if i == 0 {
			firstZ = c
		}
		e.clk.Advance(time.Second)
	}
	// zeta-fetch fails and is claimed again later: it keeps its place as the first step.
	_, err := e.fail("acme", "run", "zeta-fetch", firstZ.FencingToken, jobs.DispositionRetryable)
	require.NoError(t, err)
	e.clk.Advance(time.Second)
	_, err = e.start("acme", "run", "zeta-fetch", "w2", 60)
	require.NoError(t, err)
	want := []string{"zeta-fetch", "alpha-cut", "mid-grade", "beta-export"}
	var got []string
	after := ""
	for {
		var page []jobs.Step
		require.NoError(t, e.tx("acme", func(tx pgx.Tx) (err error) {
			page, err = e.store.PageSteps(ctx, tx, "acme", "run", after, 3)
			return err
		}))
		for _, st := range page {
			got = append(got, st.StepID)
		}
		if len(page) < 3 {
			break
		}
		after = jobs.StepCursor(page[len(page)-1])
	}
	require.Equal(t, want, got)
	var all []jobs.Step
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) (err error) {
		all, err = e.store.ListSteps(ctx, tx, "acme", "run", "", 10)
		return err
	}))
	require.True(t, all[0].FirstStartedAt.Before(all[0].StartedAt), "the retry's claim is later than the first")
}
