package httpapi

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/redisconn"
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
		pg.PoolCollector(pool), pg.StatsCollector(pool, 2*time.Second), redisconn.PoolCollector(rdb))
	return m
}
