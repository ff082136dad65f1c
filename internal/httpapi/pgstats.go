package httpapi

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// pgStatsCollector exports Postgres' own counters at scrape time, where they are cheap: one
// row of pg_stat_database for the server's database (commits, rollbacks, cache hits and
// reads, rows written, deadlocks, temp bytes) and, when pg_stat_statements is loaded
// (shared_preload_libraries: it needs a server restart, and stock Postgres does not load
// it) and installed in the database, the calls and execution time summed over every
// statement. A scrape while Postgres is unreachable exports nothing rather than failing.
type pgStatsCollector struct {
	pool    *pgxpool.Pool
	timeout time.Duration

	once       sync.Once
	statements bool // pg_stat_statements is queryable
}

var (
	pgDB = map[string]*prometheus.Desc{}
	// pgDBCols are the pg_stat_database columns exported, as strata_pg_db_<name>_total.
	pgDBCols = []struct{ col, help string }{
		{"xact_commit", "Transactions committed in the server's database."},
		{"xact_rollback", "Transactions rolled back in the server's database (every read request ends with one)."},
		{"blks_hit", "Buffer cache hits."},
		{"blks_read", "Blocks read from disk (or the OS cache): cache misses."},
		{"tup_inserted", "Rows inserted."},
		{"tup_updated", "Rows updated."},
		{"tup_deleted", "Rows deleted."},
		{"deadlocks", "Deadlocks detected."},
		{"temp_bytes", "Bytes written to temporary files (sorts and hashes that spilled)."},
	}
	pgStmtCalls = prometheus.NewDesc("strata_pg_statements_calls_total",
		"Statement executions recorded by pg_stat_statements (all statements of the database; only when the extension is loaded).", nil, nil)
	pgStmtTime = prometheus.NewDesc("strata_pg_statements_exec_seconds_total",
		"Statement execution time recorded by pg_stat_statements (only when the extension is loaded).", nil, nil)
)

func init() {
	for _, c := range pgDBCols {
		pgDB[c.col] = prometheus.NewDesc("strata_pg_db_"+c.col+"_total", c.help, nil, nil)
	}
}

func (c *pgStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range pgDB {
		ch <- d
	}
	ch <- pgStmtCalls
	ch <- pgStmtTime
}

func (c *pgStatsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.pool == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	vals := make([]float64, len(pgDBCols))
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	q := "SELECT "
	for i, col := range pgDBCols {
		if i > 0 {
			q += ", "
		}
		q += "coalesce(" + col.col + ", 0)::float8"
	}
	q += " FROM pg_stat_database WHERE datname = current_database()"
	if err := c.pool.QueryRow(ctx, q).Scan(dest...); err != nil {
		return
	}
	for i, col := range pgDBCols {
		ch <- prometheus.MustNewConstMetric(pgDB[col.col], prometheus.CounterValue, vals[i])
	}
	c.once.Do(func() {
		var ok bool
		err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_stat_statements')
			AND current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%'`).Scan(&ok)
		c.statements = err == nil && ok
	})
	if !c.statements {
		return
	}
	var calls, ms float64
	if err := c.pool.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::float8, coalesce(sum(total_exec_time), 0)::float8
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&calls, &ms); err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(pgStmtCalls, prometheus.CounterValue, calls)
	ch <- prometheus.MustNewConstMetric(pgStmtTime, prometheus.CounterValue, ms/1000)
}
