package jobs

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mem/strata/internal/pg"
)

// StalledCollector exports strata_jobs_stalled (every org's running jobs that are stalled,
// by reason) at scrape time, reading through db within timeout. When the read fails (a
// Postgres outage) the gauge is left out of that scrape and
// strata_collector_errors_total{collector="jobs_stalled"} counts it: the scrape still
// answers, with every other metric, when they are needed most.
func StalledCollector(s *Store, db pg.DBTX, timeout time.Duration) prometheus.Collector {
	return &stalledCollector{store: s, pool: db, timeout: timeout}
}

// stalledCollector exports the number of stalled jobs (all orgs) at scrape time.
type stalledCollector struct {
	store   *Store
	pool    pg.DBTX
	timeout time.Duration
	errs    atomic.Int64
}

var stalledDesc = prometheus.NewDesc("strata_jobs_stalled", "Running jobs that are stalled, by reason (lease_expired: an in-flight lease ran out; no_progress: nothing happened for STRATA_STALLED_AFTER).", []string{"reason"}, nil)

var stalledErrDesc = prometheus.NewDesc("strata_collector_errors_total",
	"Scrapes in which a collector that reads Postgres failed and left its metrics out.", nil,
	prometheus.Labels{"collector": "jobs_stalled"})

func (c *stalledCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- stalledDesc
	ch <- stalledErrDesc
}

func (c *stalledCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	le, np, err := c.store.StalledCounts(ctx, c.pool)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(stalledErrDesc, prometheus.CounterValue, float64(c.errs.Add(1)))
		return
	}
	if n := c.errs.Load(); n > 0 { // absent until the first failure
		ch <- prometheus.MustNewConstMetric(stalledErrDesc, prometheus.CounterValue, float64(n))
	}
	ch <- prometheus.MustNewConstMetric(stalledDesc, prometheus.GaugeValue, float64(le), "lease_expired")
	ch <- prometheus.MustNewConstMetric(stalledDesc, prometheus.GaugeValue, float64(np), "no_progress")
}
