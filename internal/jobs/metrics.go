package jobs

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mem/strata/internal/pg"
)

// StalledCollector exports strata_jobs_stalled (every org's running jobs that are stalled,
// by reason) at scrape time, reading through db within timeout.
func StalledCollector(s *Store, db pg.DBTX, timeout time.Duration) prometheus.Collector {
	return &stalledCollector{store: s, pool: db, timeout: timeout}
}

// stalledCollector exports the number of stalled jobs (all orgs) at scrape time.
type stalledCollector struct {
	store   *Store
	pool    pg.DBTX
	timeout time.Duration
}

var stalledDesc = prometheus.NewDesc("strata_jobs_stalled", "Running jobs that are stalled, by reason (lease_expired: an in-flight lease ran out; no_progress: nothing happened for STRATA_STALLED_AFTER).", []string{"reason"}, nil)

func (c *stalledCollector) Describe(ch chan<- *prometheus.Desc) { ch <- stalledDesc }

func (c *stalledCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	le, np, err := c.store.StalledCounts(ctx, c.pool)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(stalledDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(stalledDesc, prometheus.GaugeValue, float64(le), "lease_expired")
	ch <- prometheus.MustNewConstMetric(stalledDesc, prometheus.GaugeValue, float64(np), "no_progress")
}
