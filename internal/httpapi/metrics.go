package httpapi

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
)

type metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry, pool *pgxpool.Pool, rdb redis.UniversalClient) *metrics {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_http_requests_total", Help: "HTTP requests by method, route pattern and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "strata_http_request_duration_seconds",
			Help:    "HTTP request latency by method and route pattern.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method", "route"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_store_unavailable_total", Help: "Requests answered 503 because a store was unreachable.",
		}, []string{"store"}),
	}
	reg.MustRegister(m.requests, m.duration, m.storeErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&poolCollector{pool: pool, rdb: rdb}, &pgStatsCollector{pool: pool, timeout: 2 * time.Second})
	return m
}

// poolCollector exports pgxpool and go-redis pool statistics at scrape time.
type poolCollector struct {
	pool *pgxpool.Pool
	rdb  redis.UniversalClient
}

var (
	pgTotal    = prometheus.NewDesc("strata_pg_pool_connections", "Postgres pool connections by state.", []string{"state"}, nil)
	pgAcquires = prometheus.NewDesc("strata_pg_pool_acquires_total", "Postgres pool acquires.", nil, nil)
	pgWaits    = prometheus.NewDesc("strata_pg_pool_empty_acquires_total", "Acquires that had to wait for a connection.", nil, nil)
	pgWaitSecs = prometheus.NewDesc("strata_pg_pool_acquire_wait_seconds_total", "Time spent waiting for a connection.", nil, nil)
	redisConns = prometheus.NewDesc("strata_redis_pool_connections", "Redis pool connections by state.", []string{"state"}, nil)
	redisHits  = prometheus.NewDesc("strata_redis_pool_timeouts_total", "Redis pool wait timeouts.", nil, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pgTotal
	ch <- pgAcquires
	ch <- pgWaits
	ch <- pgWaitSecs
	ch <- redisConns
	ch <- redisHits
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(pgTotal, prometheus.GaugeValue, float64(s.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(pgTotal, prometheus.GaugeValue, float64(s.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(pgTotal, prometheus.GaugeValue, float64(s.MaxConns()), "max")
	ch <- prometheus.MustNewConstMetric(pgAcquires, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(pgWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(pgWaitSecs, prometheus.CounterValue, s.AcquireDuration().Seconds())
	if ps := c.rdb.PoolStats(); ps != nil {
		ch <- prometheus.MustNewConstMetric(redisConns, prometheus.GaugeValue, float64(ps.TotalConns), "total")
		ch <- prometheus.MustNewConstMetric(redisConns, prometheus.GaugeValue, float64(ps.IdleConns), "idle")
		ch <- prometheus.MustNewConstMetric(redisHits, prometheus.CounterValue, float64(ps.Timeouts))
	}
}
