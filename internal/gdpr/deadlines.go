package gdpr

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
)

// NearFraction is the share of an erasure's deadline after which it is "near" its deadline
// (erasure.deadline_near, deadline_near in the list).
const NearFraction = 0.8

// FlagDeadlines sets DeadlineNear and Overdue on erasures that are not completed, at now.
func FlagDeadlines(es []Erasure, now time.Time) {
	for i := range es {
		es[i].flag(now)
	}
}

func (e *Erasure) flag(now time.Time) {
	if e.Status == "completed" {
		return
	}
	e.Overdue = !now.Before(e.Deadline)
	e.DeadlineNear = !e.Overdue && !now.Before(nearAt(e.RequestedAt, e.Deadline))
}

func nearAt(requested, deadline time.Time) time.Time {
	return requested.Add(time.Duration(float64(deadline.Sub(requested)) * NearFraction))
}

// DeadlineEvents emits, in tx, erasure.deadline_near for org's unfinished erasures past 80 %
// of their deadline and erasure.overdue for those past it — each once per erasure. It
// returns how many events it emitted.
func DeadlineEvents(ctx context.Context, tx pgx.Tx, org string, now time.Time) (int, error) {
	rows, err := tx.Query(ctx, `SELECT id, subject, status, requested_at, deadline FROM gdpr_erasures
		WHERE org_id = $1 AND status <> 'completed'
		  AND requested_at + (deadline - requested_at) * $3::float8 <= $2`, org, now, NearFraction)
	if err != nil {
		return 0, pg.Interpret(err)
	}
	type due struct {
		id, subject, status string
		requested, deadline time.Time
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (due, error) {
		var d due
		return d, r.Scan(&d.id, &d.subject, &d.status, &d.requested, &d.deadline)
	})
	if err != nil || len(ds) == 0 {
		return 0, pg.Interpret(err)
	}
	keys := make([]string, 0, len(ds))
	typ := make([]string, len(ds))
	for i, d := range ds {
		typ[i] = outbox.ErasureDeadlineNear
		if !now.Before(d.deadline) {
			typ[i] = outbox.ErasureOverdue
		}
		keys = append(keys, typ[i]+":"+d.id)
	}
	done, err := outbox.Emitted(ctx, tx, org, keys)
	if err != nil {
		return 0, err
	}
	n := 0
	for i, d := range ds {
		if done[keys[i]] {
			continue
		}
		if err := outbox.Emit(ctx, tx, org, outbox.New{Type: typ[i], DedupeKey: keys[i], Data: map[string]any{
			"erasure_id": d.id, "subject": d.subject, "status": d.status,
			"deadline": d.deadline.UTC(), "requested_at": d.requested.UTC()}}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// OverdueCollector exports strata_gdpr_erasures_overdue: erasures of every org not completed
// by their deadline, counted at scrape time. When the count fails (a Postgres outage) the
// gauge is left out of that scrape and strata_collector_errors_total{collector="gdpr_overdue"}
// counts it, so the scrape still answers with every other metric.
func OverdueCollector(db pg.DBTX, now func() time.Time, timeout time.Duration) prometheus.Collector {
	return &overdueCollector{db: db, now: now, timeout: timeout}
}

type overdueCollector struct {
	db      pg.DBTX
	now     func() time.Time
	timeout time.Duration
	errs    atomic.Int64
}

var overdueDesc = prometheus.NewDesc("strata_gdpr_erasures_overdue",
	"GDPR erasures (every org) not completed by their deadline.", nil, nil)

var overdueErrDesc = prometheus.NewDesc("strata_collector_errors_total",
	"Scrapes in which a collector that reads Postgres failed and left its metrics out.", nil,
	prometheus.Labels{"collector": "gdpr_overdue"})

func (c *overdueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- overdueDesc
	ch <- overdueErrDesc
}

func (c *overdueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	var n int64
	if err := c.db.QueryRow(ctx, `SELECT strata_gdpr_erasures_overdue($1)`, now()).Scan(&n); err != nil {
		ch <- prometheus.MustNewConstMetric(overdueErrDesc, prometheus.CounterValue, float64(c.errs.Add(1)))
		return
	}
	if n := c.errs.Load(); n > 0 { // absent until the first failure
		ch <- prometheus.MustNewConstMetric(overdueErrDesc, prometheus.CounterValue, float64(n))
	}
	ch <- prometheus.MustNewConstMetric(overdueDesc, prometheus.GaugeValue, float64(n))
}
