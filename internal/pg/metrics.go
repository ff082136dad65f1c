package pg

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// PoolCollector exports the pool's statistics (connections by state, acquires, waits for
// a connection) at scrape time; it sends no query.
func PoolCollector(pool *pgxpool.Pool) prometheus.Collector { return poolCollector{pool: pool} }

var (
	poolConns    = prometheus.NewDesc("strata_pg_pool_connections", "Postgres pool connections by state.", []string{"state"}, nil)
	poolAcquires = prometheus.NewDesc("strata_pg_pool_acquires_total", "Postgres pool acquires.", nil, nil)
	poolWaits    = prometheus.NewDesc("strata_pg_pool_empty_acquires_total", "Acquires that had to wait for a connection.", nil, nil)
	poolWaitSecs = prometheus.NewDesc("strata_pg_pool_acquire_wait_seconds_total", "Time spent waiting for a connection.", nil, nil)
)

type poolCollector struct{ pool *pgxpool.Pool }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolConns
	ch <- poolAcquires
	ch <- poolWaits
	ch <- poolWaitSecs
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(s.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(s.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(s.MaxConns()), "max")
	ch <- prometheus.MustNewConstMetric(poolAcquires, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolWaitSecs, prometheus.CounterValue, s.AcquireDuration().Seconds())
}

// StatsCollector exports Postgres' own counters at scrape time, where they are cheap: one
// row of pg_stat_database for the server's database (commits, rollbacks, cache hits and
// reads, rows written, deadlocks, temp bytes) and, when pg_stat_statements is loaded
// (shared_preload_libraries: it needs a server restart, and stock Postgres does not load
// it) and installed in the database, the calls and execution time summed over every
// statement. Each scrape's queries end within timeout; a scrape while Postgres is
// unreachable exports nothing rather than failing. A nil pool exports nothing.
func StatsCollector(pool *pgxpool.Pool, timeout time.Duration) prometheus.Collector {
	return &statsCollector{pool: pool, timeout: timeout}
}

// statCols are the pg_stat_database columns exported, as strata_pg_db_<col>_total.
var statCols = []struct {
	col  string
	desc *prometheus.Desc
}{
	{"xact_commit", dbDesc("xact_commit", "Transactions committed in the server's database.")},
	{"xact_rollback", dbDesc("xact_rollback", "Transactions rolled back in the server's database (every read request ends with one).")},
	{"blks_hit", dbDesc("blks_hit", "Buffer cache hits.")},
	{"blks_read", dbDesc("blks_read", "Blocks read from disk (or the OS cache): cache misses.")},
	{"tup_inserted", dbDesc("tup_inserted", "Rows inserted.")},
	{"tup_updated", dbDesc("tup_updated", "Rows updated.")},
	{"tup_deleted", dbDesc("tup_deleted", "Rows deleted.")},
	{"deadlocks", dbDesc("deadlocks", "Deadlocks detected.")},
	{"temp_bytes", dbDesc("temp_bytes", "Bytes written to temporary files (sorts and hashes that spilled).")},
}

func dbDesc(col, help string) *prometheus.Desc {
	return prometheus.NewDesc("strata_pg_db_"+col+"_total", help, nil, nil)
}

// statSQL reads statCols.
var statSQL = func() string {
	sel := make([]string, len(statCols))
	for i, c := range statCols {
		sel[i] = "coalesce(" + c.col + ", 0)::float8"
	}
	return "SELECT " + strings.Join(sel, ", ") + " FROM pg_stat_database WHERE datname = current_database()"
}()

var (
	stmtCalls = prometheus.NewDesc("strata_pg_statements_calls_total",
		"Statement executions recorded by pg_stat_statements (all statements of the database; only when the extension is loaded).", nil, nil)
	stmtTime = prometheus.NewDesc("strata_pg_statements_exec_seconds_total",
		"Statement execution time recorded by pg_stat_statements (only when the extension is loaded).", nil, nil)
)

type statsCollector struct {
	pool    *pgxpool.Pool
	timeout time.Duration

	once       sync.Once
	statements bool // pg_stat_statements is queryable
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range statCols {
		ch <- s.desc
	}
	ch <- stmtCalls
	ch <- stmtTime
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.pool == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	vals := make([]float64, len(statCols))
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := c.pool.QueryRow(ctx, statSQL).Scan(dest...); err != nil {
		return
	}
	for i, s := range statCols {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, vals[i])
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
	ch <- prometheus.MustNewConstMetric(stmtCalls, prometheus.CounterValue, calls)
	ch <- prometheus.MustNewConstMetric(stmtTime, prometheus.CounterValue, ms/1000)
}
