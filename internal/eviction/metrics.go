package eviction

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are eviction's counters, registered on the registry the composition root passes
// in. A nil *Metrics counts nothing (tests that build an Evictor by hand).
type Metrics struct {
	// Evicted counts rows removed by eviction, by tier and reason.
	Evicted *prometheus.CounterVec
}

// NewMetrics builds eviction's metrics and registers them, with a queue-depth collector
// reading River's job table through pool at scrape time, on reg.
func NewMetrics(reg prometheus.Registerer, pool *pgxpool.Pool) *Metrics {
	m := &Metrics{
		Evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_evicted_total", Help: "Items removed by eviction, by tier and reason.",
		}, []string{"tier", "reason"}),
	}
	reg.MustRegister(m.Evicted, &queueDepth{pool: pool})
	return m
}

func (m *Metrics) evicted(tier, reason string, n int) {
	if m != nil {
		m.Evicted.WithLabelValues(tier, reason).Add(float64(n))
	}
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
