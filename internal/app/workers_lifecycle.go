package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/eviction"
	"github.com/strata-mem/strata/internal/extraction"
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
	// Rolling summaries (docs/summaries.md):
	//	every STRATA_SUMMARY_POLL rolling_summary_dispatch: due sessions and jobs → rolling_summary (unique per subject)
	river.AddWorker(workers, &consolidation.RollingDispatchWorker{Rolling: p.rolling, ExtraOrg: cfg.AdminOrg})
	river.AddWorker(workers, &consolidation.RollingWorker{Rolling: p.rolling})
	periodic = append(periodic, every(cfg.SummaryPoll, consolidation.RollingDispatchArgs{}, true))
	// Conversation memory (docs/extraction.md), when the server has an LLM:
	//	every STRATA_EXTRACTION_POLL extraction_dispatch: due sessions → extract_session (unique per session)
	if p.extractor != nil {
		river.AddWorker(workers, &extraction.DispatchWorker{Extractor: p.extractor, ExtraOrg: cfg.AdminOrg})
		river.AddWorker(workers, &extraction.SessionWorker{Extractor: p.extractor})
		periodic = append(periodic, every(cfg.ExtractionPoll, extraction.DispatchArgs{}, true))
	}
	return periodic
}

// jobMetrics are the background jobs' run and queue-wait times, fed from River's events.
type jobMetrics struct {
	// run is the run time of background jobs, by kind and outcome.
	run *prometheus.HistogramVec
	// wait is how long background jobs waited in the queue before running.
	wait *prometheus.HistogramVec
}

// newJobMetrics builds the job metrics and registers them on reg.
func newJobMetrics(reg prometheus.Registerer) *jobMetrics {
	m := &jobMetrics{
		run: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "strata_worker_job_duration_seconds", Help: "Background job run time, by kind and outcome (completed, failed, cancelled).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"kind", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "strata_worker_job_queue_wait_seconds", Help: "Time background jobs waited in the queue before running, by kind.",
			Buckets: []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900},
		}, []string{"kind"}),
	}
	reg.MustRegister(m.run, m.wait)
	return m
}

// subscribeJobMetrics feeds strata_worker_job_duration_seconds and
// strata_worker_job_queue_wait_seconds from River's job events, until the returned stop.
func (p *parts) subscribeJobMetrics(c *queue.Client) func() {
	m := p.jobMetrics
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
				// The wait first: a scrape that sees the run count sees the wait too.
				m.wait.WithLabelValues(e.Job.Kind).Observe(e.JobStats.QueueWaitDuration.Seconds())
				m.run.WithLabelValues(e.Job.Kind, outcome).Observe(e.JobStats.RunDuration.Seconds())
			}
		}
	}()
	return func() { stop(); cancel(); <-done }
}
