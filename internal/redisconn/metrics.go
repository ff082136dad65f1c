package redisconn

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// PoolCollector exports the client's connection pool statistics (connections by state,
// wait timeouts) at scrape time; it sends no command.
func PoolCollector(rdb redis.UniversalClient) prometheus.Collector { return poolCollector{rdb: rdb} }

var (
	poolConns    = prometheus.NewDesc("strata_redis_pool_connections", "Redis pool connections by state.", []string{"state"}, nil)
	poolTimeouts = prometheus.NewDesc("strata_redis_pool_timeouts_total", "Redis pool wait timeouts.", nil, nil)
)

type poolCollector struct{ rdb redis.UniversalClient }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolConns
	ch <- poolTimeouts
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	if ps := c.rdb.PoolStats(); ps != nil {
		ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(ps.TotalConns), "total")
		ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(ps.IdleConns), "idle")
		ch <- prometheus.MustNewConstMetric(poolTimeouts, prometheus.CounterValue, float64(ps.Timeouts))
	}
}
