package eviction

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Worker metrics. They are process-wide (any server or worker in the process counts into
// them); internal/httpapi registers them with its /metrics registry.
var (
	// Evicted counts rows removed by eviction, by tier and reason.
	Evicted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_evicted_total", Help: "Items removed by eviction, by tier and reason.",
	}, []string{"tier", "reason"})
	// Consolidated counts consolidation results, by task (job_summary, compacted_events,
	// merged, promoted).
	Consolidated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_consolidated_total", Help: "Items consolidated, by task: job_summary, compacted_events, merged, promoted.",
	}, []string{"task"})
	// SummarizerFailures counts LLM summaries that failed and fell back to the extractive one.
	SummarizerFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "strata_consolidation_llm_failures_total", Help: "LLM job summaries that failed (the extractive summary was written instead).",
	})
	// JobRun is the run time of background jobs, by kind and outcome.
	JobRun = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "strata_worker_job_duration_seconds", Help: "Background job run time, by kind and outcome (completed, failed, cancelled).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"kind", "outcome"})
	// JobWait is how long background jobs waited in the queue before running.
	JobWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "strata_worker_job_queue_wait_seconds", Help: "Time background jobs waited in the queue before running, by kind.",
		Buckets: []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900},
	}, []string{"kind"})
)

// Collectors returns the worker metrics plus a queue-depth collector reading River's job
// table through pool at scrape time.
func Collectors(pool *pgxpool.Pool) []prometheus.Collector {
	return []prometheus.Collector{Evicted, Consolidated, SummarizerFailures, JobRun, JobWait, &queueDepth{pool: pool}}
}

var queueDepthDesc = prometheus.NewDesc("strata_worker_queue_depth",
	"Background jobs not yet finished, by kind and state (available, scheduled, retryable, running).", []string{"kind", "state"}, nil)

type queueDepth struct{ pool *pgxpool.Pool }

func (q *queueDepth) Describe(ch chan<- *prometheus.Desc) { ch <- queueDepthDesc }

func (q *queueDepth) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := q.pool.Query(ctx, `SELECT kind, state::text, count(*) FROM river_job
		WHERE state IN ('available', 'scheduled', 'retryable', 'running') GROUP BY kind, state`)
	if err != nil {
		return // the scrape still answers the other metrics
	}
	defer rows.Close()
	for rows.Next() {
		var kind, state string
		var n int64
		if rows.Scan(&kind, &state, &n) == nil {
			ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(n), kind, state)
		}
	}
}
