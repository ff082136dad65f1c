package httpapi_test

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// /metrics carries Postgres' own counters for the server's database, and they move with
// the requests: a write commits, a read that touched Postgres rolls back.
func TestPerfPostgresStatsInMetrics(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("acme", "agent")
	metric := func(name string) float64 {
		t.Helper()
		m := s.Do("GET", "/metrics", "", nil)
		require.Equal(t, 200, m.Status)
		v := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(m.Body)
		require.NotNil(t, v, "%s missing from /metrics", name)
		f, err := strconv.ParseFloat(string(v[1]), 64)
		require.NoError(t, err)
		return f
	}
	commits, inserted := metric("strata_pg_db_xact_commit_total"), metric("strata_pg_db_tup_inserted_total")
	for i := range 3 {
		r := s.Do("POST", "/v1/jobs/j1/events", agent, map[string]any{"op": "crop", "params": map[string]any{"x": i}})
		require.Equal(t, 201, r.Status, string(r.Body))
	}
	// pg_stat_database is updated when a backend reports (at most every second or so): wait.
	require.Eventually(t, func() bool {
		return metric("strata_pg_db_xact_commit_total") >= commits+3 && metric("strata_pg_db_tup_inserted_total") >= inserted+6
	}, 20e9, 100e6, "3 appends = 3 commits, ≥ 6 rows (event + audit row each)")
	for _, name := range []string{"strata_pg_db_xact_rollback_total", "strata_pg_db_blks_hit_total", "strata_pg_db_deadlocks_total"} {
		metric(name)
	}
}

// Profiling answers admin keys only.
func TestPerfPprofNeedsAdminKey(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	require.Equal(t, 401, s.Do("GET", "/debug/pprof/", "", nil).Status)
	require.Equal(t, 403, s.Do("GET", "/debug/pprof/", s.NewKey("acme", "agent"), nil).Status)
	r := s.Do("GET", "/debug/pprof/heap?debug=1", s.AdminKey, nil)
	require.Equal(t, 200, r.Status)
	require.Contains(t, string(r.Body), "heap profile")
}
