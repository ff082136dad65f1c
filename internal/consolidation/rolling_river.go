package consolidation

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/queue"
	"github.com/strata-mem/strata/internal/summaries"
)

// RollingArgs folds one session's or job's backlog into its summary. The args name the org,
// the subject and its user, so an erasure of the user deletes the queued job.
type RollingArgs struct {
	Org    string `json:"org"`
	Of     string `json:"of"` // summaries.KindSession or KindJob
	ID     string `json:"id"`
	UserID string `json:"user_id,omitempty"`
}

// Kind names the job.
func (RollingArgs) Kind() string { return "rolling_summary" }

// InsertOpts: one job per subject waiting or running; a failure is retried by River.
func (RollingArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
		rivertype.JobStateRunning, rivertype.JobStateScheduled}}}
}

// RollingDispatchArgs is the periodic (leader-elected) job that queues a RollingArgs for
// every session and job due a new summary version.
type RollingDispatchArgs struct{}

// Kind names the job.
func (RollingDispatchArgs) Kind() string { return "rolling_summary_dispatch" }

// InsertOpts keeps one waiting at a time.
func (RollingDispatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Second}}
}

// RollingDispatchWorker offers every org's due subjects to the RollingWorkers.
type RollingDispatchWorker struct {
	river.WorkerDefaults[RollingDispatchArgs]
	Rolling  *Rolling
	ExtraOrg string
}

// Work dispatches.
func (w *RollingDispatchWorker) Work(ctx context.Context, _ *river.Job[RollingDispatchArgs]) error {
	orgs, err := queue.Orgs(ctx, w.Rolling.Pool, w.ExtraOrg)
	if err != nil {
		return err
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	for _, org := range orgs {
		if err := pg.InOrgTx(ctx, w.Rolling.Pool, org, func(tx pgx.Tx) error {
			var params []river.InsertManyParams
			for _, kind := range []string{summaries.KindSession, summaries.KindJob} {
				due, err := w.Rolling.Candidates(ctx, tx, org, kind, 500)
				if err != nil {
					return err
				}
				for _, a := range due {
					params = append(params, river.InsertManyParams{Args: a})
				}
			}
			if len(params) == 0 {
				return nil
			}
			_, err := client.InsertManyTx(ctx, tx, params)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// RollingWorker folds one subject.
type RollingWorker struct {
	river.WorkerDefaults[RollingArgs]
	Rolling *Rolling
	// Done, when set, is called after each run (tests wait on it).
	Done func(RollingArgs, RollingResult, error)
}

// Timeout leaves room for several model calls.
func (w *RollingWorker) Timeout(*river.Job[RollingArgs]) time.Duration { return 10 * time.Minute }

// Work runs the fold.
func (w *RollingWorker) Work(ctx context.Context, job *river.Job[RollingArgs]) error {
	var res RollingResult
	var err error
	if job.Args.Of == summaries.KindJob {
		res, err = w.Rolling.SummarizeJob(ctx, job.Args.Org, job.Args.ID)
	} else {
		res, err = w.Rolling.SummarizeSession(ctx, job.Args.Org, job.Args.ID)
	}
	if w.Done != nil {
		w.Done(job.Args, res, err)
	}
	return err
}
