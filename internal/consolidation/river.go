package consolidation

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/queue"
)

// DispatchArgs is the periodic (leader-elected) job that turns unprocessed job_outbox rows
// into SummarizeJobArgs jobs.
type DispatchArgs struct{}

// Kind names the job.
func (DispatchArgs) Kind() string { return "consolidation_dispatch" }

// InsertOpts keeps one waiting at a time.
func (DispatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Second}}
}

// SummarizeJobArgs summarises one finished job into its job memory.
type SummarizeJobArgs struct {
	Org   string `json:"org"`
	JobID string `json:"job_id"`
}

// Kind names the job.
func (SummarizeJobArgs) Kind() string { return "consolidate_job" }

// InsertOpts: unique per (org, job) while waiting, running or completed, so dispatching a
// row again (every poll until it is processed) never queues a second job for it.
func (SummarizeJobArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 10, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// ScheduleArgs is the periodic job that fans consolidation out to one job per org.
type ScheduleArgs struct{}

// Kind names the job.
func (ScheduleArgs) Kind() string { return "consolidation_schedule" }

// InsertOpts keeps one waiting at a time.
func (ScheduleArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Minute}}
}

// OrgArgs runs compaction, merge and promotion for one org.
type OrgArgs struct {
	Org string `json:"org"`
}

// Kind names the job.
func (OrgArgs) Kind() string { return "consolidate_org" }

// Dispatch inserts a SummarizeJobArgs for each of org's unprocessed outbox rows (at most
// limit) inside tx, and returns how many it offered (duplicates of queued jobs are skipped
// by River's uniqueness).
func (c *Consolidator) Dispatch(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, org string, limit int) (int, error) {
	rows, err := c.Jobs.PendingOutbox(ctx, tx, org, jobs.OutboxKindConsolidate, c.maxAttempts(), limit)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	params := make([]river.InsertManyParams, len(rows))
	for i, r := range rows {
		params[i] = river.InsertManyParams{Args: SummarizeJobArgs{Org: org, JobID: r.JobID}}
	}
	if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
		return 0, err
	}
	return len(rows), nil
}

// DispatchWorker polls the outbox of every org.
type DispatchWorker struct {
	river.WorkerDefaults[DispatchArgs]
	Consolidator *Consolidator
	ExtraOrg     string
}

// Work dispatches every org's pending rows.
func (w *DispatchWorker) Work(ctx context.Context, _ *river.Job[DispatchArgs]) error {
	orgs, err := queue.Orgs(ctx, w.Consolidator.Pool, w.ExtraOrg)
	if err != nil {
		return err
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	for _, org := range orgs {
		if err := pg.InOrgTx(ctx, w.Consolidator.Pool, org, func(tx pgx.Tx) error {
			_, err := w.Consolidator.Dispatch(ctx, client, tx, org, 500)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// SummarizeJobWorker writes one job memory.
type SummarizeJobWorker struct {
	river.WorkerDefaults[SummarizeJobArgs]
	Consolidator *Consolidator
	// RestrictedSnooze is how long a restricted subject's job waits before it checks again [5m].
	RestrictedSnooze time.Duration
	// Done, when set, is called after each summary (tests count executions with it).
	Done func(ConsolidatedJob)
}

func (w *SummarizeJobWorker) snooze() time.Duration {
	if w.RestrictedSnooze > 0 {
		return w.RestrictedSnooze
	}
	return 5 * time.Minute
}

// Timeout leaves room for an LLM call and embedding.
func (w *SummarizeJobWorker) Timeout(*river.Job[SummarizeJobArgs]) time.Duration {
	return 5 * time.Minute
}

// Work summarises the job.
func (w *SummarizeJobWorker) Work(ctx context.Context, job *river.Job[SummarizeJobArgs]) error {
	res, err := w.Consolidator.SummarizeJob(ctx, job.Args.Org, job.Args.JobID)
	if w.Done != nil {
		w.Done(res)
	}
	if errors.Is(err, ErrDeferred) {
		// Restricted subject: try again later; a snooze is no attempt, so the job waits
		// as long as the restriction stands (an erasure deletes the job with the data).
		return river.JobSnooze(w.snooze())
	}
	return err
}

// ScheduleWorker inserts one OrgArgs per org, unique per org and interval.
type ScheduleWorker struct {
	river.WorkerDefaults[ScheduleArgs]
	Pool     *pgxpool.Pool
	ExtraOrg string
	Interval time.Duration
}

// Work fans out.
func (w *ScheduleWorker) Work(ctx context.Context, _ *river.Job[ScheduleArgs]) error {
	_, err := queue.InsertPerOrg(ctx, river.ClientFromContext[pgx.Tx](ctx), w.Pool, w.ExtraOrg, w.Interval,
		func(org string) OrgArgs { return OrgArgs{Org: org} })
	return err
}

// OrgWorker consolidates one org.
type OrgWorker struct {
	river.WorkerDefaults[OrgArgs]
	Consolidator *Consolidator
}

// Timeout allows a large org's run.
func (w *OrgWorker) Timeout(*river.Job[OrgArgs]) time.Duration { return 30 * time.Minute }

// Work runs compaction, merge and promotion.
func (w *OrgWorker) Work(ctx context.Context, job *river.Job[OrgArgs]) error {
	_, err := w.Consolidator.RunOrg(ctx, job.Args.Org)
	return err
}
