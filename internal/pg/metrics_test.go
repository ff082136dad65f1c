package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// gather scrapes cs once: each series' value by name (and first label's value, after "/").
func gather(t *testing.T, cs ...prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs...)
	fams, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			if len(m.GetLabel()) > 0 {
				name += "/" + m.GetLabel()[0].GetValue()
			}
			out[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return out
}

// The pool and database collectors export what they describe, read at scrape time.
func TestPgCollectors(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	require.NoError(t, pool.Ping(context.Background()))
	m := gather(t, pg.PoolCollector(pool), pg.StatsCollector(pool, 2*time.Second))

	require.Equal(t, float64(pool.Config().MaxConns), m["strata_pg_pool_connections/max"])
	require.Contains(t, m, "strata_pg_pool_connections/idle")
	require.Contains(t, m, "strata_pg_pool_connections/acquired")
	require.Positive(t, m["strata_pg_pool_acquires_total"])
	require.Contains(t, m, "strata_pg_pool_empty_acquires_total")
	require.Contains(t, m, "strata_pg_pool_acquire_wait_seconds_total")
	for _, col := range []string{"xact_commit", "xact_rollback", "blks_hit", "blks_read", "tup_inserted", "tup_updated",
		"tup_deleted", "deadlocks", "temp_bytes"} {
		require.Contains(t, m, "strata_pg_db_"+col+"_total")
	}
	require.Positive(t, m["strata_pg_db_xact_commit_total"])

	// No pool (or no Postgres): nothing exported, no error.
	require.Empty(t, gather(t, pg.StatsCollector(nil, time.Second)))
}
