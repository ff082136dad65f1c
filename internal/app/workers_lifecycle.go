package app

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/eviction"
	"github.com/strata-mem/strata/internal/queue"
)

// lifecycleWorkers registers the consolidation and eviction workers (docs/workers.md) on
// workers and returns their periodic jobs (leader-elected: one replica schedules them)
// and a function that starts job metrics once the queue client exists.
//
//	every STRATA_OUTBOX_POLL            consolidation_dispatch: job_outbox rows → consolidate_job (unique per job)
//	every STRATA_CONSOLIDATION_INTERVAL consolidation_schedule → consolidate_org per org (unique per org and period)
//	every STRATA_EVICTION_INTERVAL      eviction_schedule → evict_org per org (unique per org and period)
func (p *parts) lifecycleWorkers(workers *river.Workers) []*river.PeriodicJob {
	cfg, pool, cons, ev := p.cfg, p.pool, p.consolidator, p.evictor
	river.AddWorker(workers, &consolidation.DispatchWorker{Consolidator: cons, ExtraOrg: cfg.AdminOrg})
	river.AddWorker(workers, &consolidation.SummarizeJobWorker{Consolidator: cons})
	river.AddWorker(workers, &consolidation.ScheduleWorker{Pool: pool, ExtraOrg: cfg.AdminOrg, Interval: cfg.ConsolidationInterval})
	river.AddWorker(workers, &consolidation.OrgWorker{Consolidator: cons})
	river.AddWorker(workers, &eviction.ScheduleWorker{Pool: pool, ExtraOrg: cfg.AdminOrg, Interval: cfg.EvictionInterval})
	river.AddWorker(workers, &eviction.OrgWorker{Pool: pool, Evictor: ev})
	every := func(d time.Duration, args river.JobArgs, onStart bool) *river.PeriodicJob {
		return river.NewPeriodicJob(river.PeriodicInterval(d),
			func() (river.JobArgs, *river.InsertOpts) { return args, nil },
			&river.PeriodicJobOpts{RunOnStart: onStart})
	}
	periodic := []*river.PeriodicJob{
		every(cfg.OutboxPoll, consolidation.DispatchArgs{}, true),
		every(cfg.ConsolidationInterval, consolidation.ScheduleArgs{}, false),
		every(cfg.EvictionInterval, eviction.ScheduleArgs{}, false),
	}
	return periodic
}

// subscribeJobMetrics feeds strata_worker_job_duration_seconds and
// strata_worker_job_queue_wait_seconds from River's job events, until the returned stop.
func subscribeJobMetrics(c *queue.Client) func() {
	events, cancel := c.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-events:
				if !ok {
					return
				}
				if e.Job == nil || e.JobStats == nil {
					continue
				}
				outcome := "completed"
				switch e.Kind {
				case river.EventKindJobFailed:
					outcome = "failed"
				case river.EventKindJobCancelled:
					outcome = "cancelled"
				}
				eviction.JobRun.WithLabelValues(e.Job.Kind, outcome).Observe(e.JobStats.RunDuration.Seconds())
				eviction.JobWait.WithLabelValues(e.Job.Kind).Observe(e.JobStats.QueueWaitDuration.Seconds())
			}
		}
	}()
	return func() { stop(); cancel(); <-done }
}
