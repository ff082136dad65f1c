package redisconn_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/redisconn"
	"github.com/strata-mem/strata/internal/testenv"
)

// The pool collector exports the client's pool statistics at scrape time.
func TestPoolCollector(t *testing.T) {
	t.Parallel()
	rdb, _ := testenv.Redis(t)
	require.NoError(t, rdb.Ping(context.Background()).Err())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(redisconn.PoolCollector(rdb))
	fams, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			if len(m.GetLabel()) > 0 {
				name += "/" + m.GetLabel()[0].GetValue()
			}
			got[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	require.GreaterOrEqual(t, got["strata_redis_pool_connections/total"], 1.0)
	require.Contains(t, got, "strata_redis_pool_connections/idle")
	require.Contains(t, got, "strata_redis_pool_timeouts_total")
}
