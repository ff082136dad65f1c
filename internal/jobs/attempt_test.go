package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/strata"
)

func (e *env) startWith(org, job, step, owner string, lease int, params string) (jobs.Claim, error) {
	var c jobs.Claim
	err := e.tx(org, func(tx pgx.Tx) error {
		var err error
		c, err = e.store.Start(context.Background(), tx, org, job, step, jobs.StartInput{Owner: owner, LeaseSeconds: lease,
			Input: jobs.StepInput{Tool: "ffmpeg", Params: json.RawMessage(params)}})
		return err
	})
	return c, err
}

func (e *env) failWith(org, job, step string, token int64, msg, disp string) error {
	return e.tx(org, func(tx pgx.Tx) error {
		_, err := e.store.Fail(context.Background(), tx, org, job, step, token, msg, disp)
		return err
	})
}

func (e *env) attempts(org, job, step string) []jobs.Attempt {
	e.t.Helper()
	var out []jobs.Attempt
	require.NoError(e.t, e.tx(org, func(tx pgx.Tx) error {
		var err error
		out, err = e.store.PageAttempts(context.Background(), tx, org, job, step, "", 1000)
		return err
	}))
	return out
}

func paramsOf(t *testing.T, a jobs.Attempt) string {
	t.Helper()
	var in jobs.StepInput
	require.NoError(t, json.Unmarshal(a.Input, &in))
	return string(in.Params)
}

// A step failed, retried, failed again and then completed keeps three attempts, each with its
// own input, error, outcome, token, heartbeats and duration.
func TestStepAttemptsFailRetryComplete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.job("acme", "j", jobs.JobSpec{Goal: "cut"})
	t0 := e.clk.Now()

	c1, err := e.startWith("acme", "j", "cut", "w1", 60, `{"try":1}`)
	require.NoError(t, err)
	e.clk.Advance(2 * time.Second)
	require.NoError(t, e.failWith("acme", "j", "cut", c1.FencingToken, "ffmpeg exit 1", jobs.DispositionRetryable))

	c2, err := e.startWith("acme", "j", "cut", "w2", 60, `{"try":2}`)
	require.NoError(t, err)
	e.clk.Advance(time.Second)
	require.NoError(t, e.failWith("acme", "j", "cut", c2.FencingToken, "out of disk", jobs.DispositionManualReview))
	// Cleared by an operator, then claimed again.
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		_, err := e.store.ClearStep(context.Background(), tx, "acme", "j", "cut", "key-op")
		return err
	}))
	c3, err := e.startWith("acme", "j", "cut", "w3", 60, `{"try":3}`)
	require.NoError(t, err)
	for range 2 {
		e.clk.Advance(time.Second)
		_, err = e.heartbeat("acme", "j", "cut", c3.FencingToken)
		require.NoError(t, err)
	}
	// Open: the current claim, with a live lease and no outcome.
	open := e.attempts("acme", "j", "cut")
	require.Len(t, open, 3)
	require.Empty(t, open[2].Outcome)
	require.Equal(t, "live", open[2].Lease)
	require.Nil(t, open[2].ReleasedAt)
	_, err = e.complete("acme", "j", "cut", c3.FencingToken, `{"uri":"s3://out"}`)
	require.NoError(t, err)

	got := e.attempts("acme", "j", "cut")
	require.Len(t, got, 3)
	for i, a := range got {
		require.EqualValues(t, i+1, a.FencingToken)
		require.Equal(t, i+1, a.Attempt)
		require.Equal(t, "cut", a.StepID)
		require.Empty(t, a.Lease)
		require.NotNil(t, a.ReleasedAt)
	}
	require.Equal(t, []string{"w1", "w2", "w3"}, []string{got[0].Owner, got[1].Owner, got[2].Owner})
	require.Equal(t, []string{jobs.ClaimNew, jobs.ClaimRetry, jobs.ClaimRetry}, []string{got[0].Claim, got[1].Claim, got[2].Claim})
	require.JSONEq(t, `{"try":1}`, paramsOf(t, got[0]))
	require.JSONEq(t, `{"try":2}`, paramsOf(t, got[1]))
	require.JSONEq(t, `{"try":3}`, paramsOf(t, got[2]))
	require.Equal(t, jobs.OutcomeFailed, got[0].Outcome)
	require.Equal(t, "ffmpeg exit 1", got[0].Error)
	require.Equal(t, jobs.DispositionRetryable, got[0].Disposition)
	require.Equal(t, jobs.OutcomeFailed, got[1].Outcome)
	require.Equal(t, "out of disk", got[1].Error)
	require.Equal(t, jobs.DispositionManualReview, got[1].Disposition, "clearing the step does not rewrite the attempt")
	require.Equal(t, jobs.OutcomeCompleted, got[2].Outcome)
	require.Empty(t, got[2].Error)
	require.Equal(t, t0, got[0].AcquiredAt)
	require.EqualValues(t, 2000, got[0].DurationMS)
	require.EqualValues(t, 1000, got[1].DurationMS)
	require.EqualValues(t, 2000, got[2].DurationMS)
	require.Equal(t, 0, got[0].Heartbeats)
	require.Equal(t, 2, got[2].Heartbeats)
	require.Equal(t, got[2].LastHeartbeatAt.Add(60*time.Second), got[2].LeaseExpiresAt)

	// Paging: oldest first, the cursor is the last fencing token.
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		p, err := e.store.PageAttempts(context.Background(), tx, "acme", "j", "cut", "1", 1)
		require.Len(t, p, 1)
		require.EqualValues(t, 2, p[0].FencingToken)
		return err
	}))
	// A bad cursor names the field; an unknown step is not found.
	err = e.tx("acme", func(tx pgx.Tx) error {
		_, err := e.store.PageAttempts(context.Background(), tx, "acme", "j", "cut", "x", 10)
		return err
	})
	var fe *strata.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Equal(t, "cursor", fe.Field)
	err = e.tx("acme", func(tx pgx.Tx) error {
		_, err := e.store.PageAttempts(context.Background(), tx, "acme", "j", "nope", "", 10)
		return err
	})
	require.ErrorIs(t, err, strata.ErrNotFound)
}

// A lease that ran out and was taken over by another owner: the first attempt ends lease_lost
// at its lease's expiry, the second is a takeover under the next token; the fenced-off
// holder's late complete writes nothing to either.
func TestStepAttemptsLeaseLostAndTakenOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.job("acme", "j", jobs.JobSpec{})
	c1, err := e.startWith("acme", "j", "render", "w1", 30, `{"scene":1}`)
	require.NoError(t, err)
	expiry := *c1.LeaseExpiresAt
	e.clk.Advance(45 * time.Second)
	c2, err := e.startWith("acme", "j", "render", "w2", 30, `{"scene":1,"retry":true}`)
	require.NoError(t, err)
	require.EqualValues(t, 2, c2.FencingToken)
	_, err = e.complete("acme", "j", "render", c1.FencingToken, `"late"`)
	requireConflict(t, err)
	_, err = e.complete("acme", "j", "render", c2.FencingToken, `"done"`)
	require.NoError(t, err)

	got := e.attempts("acme", "j", "render")
	require.Len(t, got, 2)
	require.Equal(t, "w1", got[0].Owner)
	require.EqualValues(t, 1, got[0].FencingToken)
	require.Equal(t, jobs.OutcomeLeaseLost, got[0].Outcome)
	require.Equal(t, expiry, *got[0].ReleasedAt)
	require.EqualValues(t, 30000, got[0].DurationMS)
	require.Equal(t, "w2", got[1].Owner)
	require.EqualValues(t, 2, got[1].FencingToken)
	require.Equal(t, jobs.ClaimTakeover, got[1].Claim)
	require.Equal(t, jobs.OutcomeCompleted, got[1].Outcome)
	require.JSONEq(t, `{"scene":1,"retry":true}`, paramsOf(t, got[1]))
}

// An acknowledged handoff moves a live lease: the holder's attempt ends taken_over and the
// receiver's opens under the next token with the same input.
func TestStepAttemptsHandoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.job("acme", "j", jobs.JobSpec{Owner: "a"})
	_, err := e.startWith("acme", "j", "s", "a", 60, `{"k":1}`)
	require.NoError(t, err)
	e.clk.Advance(time.Second)
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		h, _, err := e.store.CreateHandoff(ctx, tx, "acme", "j", jobs.HandoffInput{From: "a", To: "b"})
		if err != nil {
			return err
		}
		_, _, err = e.store.AckHandoff(ctx, tx, "acme", "j", h.ID, "b")
		return err
	}))
	got := e.attempts("acme", "j", "s")
	require.Len(t, got, 2)
	require.Equal(t, jobs.OutcomeTakenOver, got[0].Outcome)
	require.Equal(t, e.clk.Now(), *got[0].ReleasedAt)
	require.Equal(t, "b", got[1].Owner)
	require.Equal(t, jobs.ClaimHandoff, got[1].Claim)
	require.EqualValues(t, 2, got[1].FencingToken)
	require.Empty(t, got[1].Outcome)
	require.JSONEq(t, `{"k":1}`, paramsOf(t, got[1]))
	_, err = e.complete("acme", "j", "s", 2, `"ok"`)
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeCompleted, e.attempts("acme", "j", "s")[1].Outcome)
}

// Resume shows the attempt history of in-flight and failed steps (the failing attempt's input
// and error), not of completed ones.
func TestResumeIncludesAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.job("acme", "j", jobs.JobSpec{})
	c, err := e.startWith("acme", "j", "a", "w", 60, `{"n":1}`)
	require.NoError(t, err)
	_, err = e.complete("acme", "j", "a", c.FencingToken, `1`)
	require.NoError(t, err)
	c, err = e.startWith("acme", "j", "b", "w", 60, `{"n":2}`)
	require.NoError(t, err)
	require.NoError(t, e.failWith("acme", "j", "b", c.FencingToken, "bad frame 12", jobs.DispositionManualReview))
	_, err = e.startWith("acme", "j", "c", "w", 60, `{"n":3}`)
	require.NoError(t, err)

	for _, batched := range []bool{true, false} {
		var r jobs.Resume
		require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
			var err error
			if batched {
				r, err = e.store.Resume(context.Background(), tx, "acme", "j")
			} else {
				r, err = e.store.Resume(context.Background(), noBatch{tx}, "acme", "j")
			}
			return err
		}))
		require.Len(t, r.FailedSteps, 1)
		h := r.FailedSteps[0].History
		require.Len(t, h, 1)
		require.Equal(t, "bad frame 12", h[0].Error)
		require.JSONEq(t, `{"n":2}`, paramsOf(t, h[0]))
		require.Len(t, r.InFlight, 1)
		require.Len(t, r.InFlight[0].History, 1)
		require.Equal(t, "live", r.InFlight[0].History[0].Lease)
		require.Len(t, r.CompletedSteps, 1)
	}
}

// noBatch hides a transaction's SendBatch, so Resume takes its statement-by-statement path.
type noBatch struct{ pgx.Tx }

func (noBatch) SendBatch() {}

// Retention keeps the newest N attempts of each step (never the current claim); a fork brings
// the attempts of the steps it copies; another org sees none of them.
func TestStepAttemptsRetentionForkIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.job("acme", "j", jobs.JobSpec{})
	for i := range 3 {
		c, err := e.startWith("acme", "j", "s", "w", 60, `{}`)
		require.NoError(t, err)
		e.clk.Advance(time.Second)
		if i < 2 {
			require.NoError(t, e.failWith("acme", "j", "s", c.FencingToken, "boom", jobs.DispositionRetryable))
		} else {
			_, err = e.complete("acme", "j", "s", c.FencingToken, `"ok"`)
			require.NoError(t, err)
		}
	}
	_, err := e.startWith("acme", "j", "open", "w", 60, `{}`)
	require.NoError(t, err)
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		_, err := e.store.PutCheckpoint(ctx, tx, "acme", "j", jobs.CheckpointInput{NextAction: "go"}, nil)
		return err
	}))

	// Fork: the completed step comes with its three attempts.
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		_, _, err := e.store.Fork(ctx, tx, "acme", "j", 1, jobs.ForkInput{NewJobID: "f"})
		return err
	}))
	require.Len(t, e.attempts("acme", "f", "s"), 3)

	// Another org: nothing, and the step is not found.
	require.NoError(t, e.tx("other", func(tx pgx.Tx) error {
		got, err := e.store.ListAttempts(ctx, tx, "other", "j", "s", 0, 100)
		require.Empty(t, got)
		_, err2 := e.store.PageAttempts(ctx, tx, "other", "j", "s", "", 100)
		require.ErrorIs(t, err2, strata.ErrNotFound)
		refs, err3 := e.store.SurplusAttempts(ctx, tx, "other", 1, 100)
		require.Empty(t, refs)
		return errors.Join(err, err3)
	}))

	var refs []jobs.AttemptRef
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		var err error
		refs, err = e.store.SurplusAttempts(ctx, tx, "acme", 1, 100)
		return err
	}))
	require.Equal(t, []string{"f/s#1", "f/s#2", "j/s#1", "j/s#2"}, []string{refs[0].String(), refs[1].String(), refs[2].String(), refs[3].String()})
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		n, err := e.store.DeleteAttempts(ctx, tx, "acme", refs)
		require.EqualValues(t, 4, n)
		return err
	}))
	got := e.attempts("acme", "j", "s")
	require.Len(t, got, 1)
	require.EqualValues(t, 3, got[0].FencingToken)
	require.Len(t, e.attempts("acme", "j", "open"), 1)

	// Erasing the job takes its attempts with it and counts them.
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		if _, err := jobs.DeleteJob(ctx, tx, "acme", "f"); err != nil {
			return err
		}
		je, err := jobs.DeleteJob(ctx, tx, "acme", "j")
		require.EqualValues(t, 2, je.Attempts)
		return err
	}))
}

// Resume's batch runs on generic plans (pg.GenericPlansSQL: key reads, planned once per
// connection instead of per execution on the partitioned tables), the caller's queued reads
// with it, and leaves the transaction on the session's plan choice.
func TestResumePlansGenericOnlyInItsBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.job("acme", "j", jobs.JobSpec{})
	ctx := context.Background()
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		var inBatch, after string
		r, err := e.store.Resume(ctx, tx, "acme", "j", func(b *pgx.Batch) {
			b.Queue(`SELECT current_setting('plan_cache_mode')`).QueryRow(func(row pgx.Row) error { return row.Scan(&inBatch) })
		})
		if err != nil {
			return err
		}
		require.Equal(t, "j", r.Job.JobID)
		require.Equal(t, "force_generic_plan", inBatch)
		require.NoError(t, tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&after))
		require.Equal(t, "auto", after)
		return nil
	}))
}
