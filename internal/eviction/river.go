package eviction

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/queue"
)

// ScheduleArgs is the periodic (leader-elected) job that fans eviction out to one job per
// org.
type ScheduleArgs struct{}

// Kind names the job.
func (ScheduleArgs) Kind() string { return "eviction_schedule" }

// InsertOpts keeps one waiting at a time.
func (ScheduleArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Minute}}
}

// OrgArgs applies org's policy once.
type OrgArgs struct {
	Org string `json:"org"`
}

// Kind names the job.
func (OrgArgs) Kind() string { return "evict_org" }

// ScheduleWorker inserts one OrgArgs per org, unique per org and interval, so replicas
// and overlapping schedules never run an org twice in one period.
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

// OrgWorker runs eviction for one org, in one transaction, then drops the Redis copies of
// purged sessions.
type OrgWorker struct {
	river.WorkerDefaults[OrgArgs]
	Pool    *pgxpool.Pool
	Evictor *Evictor
}

// Timeout allows a large org's run.
func (w *OrgWorker) Timeout(*river.Job[OrgArgs]) time.Duration { return 30 * time.Minute }

// Work applies the policy: batch after batch (each its own transaction) while a rule
// had more candidates than one batch takes, up to 20 batches per run.
func (w *OrgWorker) Work(ctx context.Context, job *river.Job[OrgArgs]) error {
	for range 20 {
		var after func(context.Context)
		var rep EvictionReport
		err := pg.InOrgTx(ctx, w.Pool, job.Args.Org, func(tx pgx.Tx) error {
			var err error
			rep, after, err = w.Evictor.Run(ctx, tx, job.Args.Org, true, WorkerActor)
			return err
		})
		if err != nil {
			return err
		}
		after(ctx)
		if w.Evictor.Log != nil && rep.Total > 0 {
			w.Evictor.Log.Info("eviction applied", "org", job.Args.Org, "total", rep.Total, "policy_version", rep.PolicyVersion)
		}
		more := false
		for _, it := range rep.Items {
			more = more || it.More
		}
		if !more {
			return nil
		}
	}
	return nil
}
