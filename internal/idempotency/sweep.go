package idempotency

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/pg"
)

// SweepArgs is the periodic job that deletes expired idempotency records.
type SweepArgs struct{}

// Kind names the job.
func (SweepArgs) Kind() string { return "sweep_idempotency" }

// InsertOpts makes the job unique while one is waiting, so replicas do not pile them up.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Minute}}
}

// SweepWorker deletes expired records, org by org (row-level security binds the worker as
// it binds requests). Expired records are already ignored by Claim; this only reclaims space.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	Pool     *pgxpool.Pool
	ExtraOrg string
	Now      func() time.Time
}

// Work runs one sweep.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	_, err := w.Sweep(ctx)
	return err
}

// Sweep deletes expired records of every org and returns how many.
func (w *SweepWorker) Sweep(ctx context.Context) (int64, error) {
	rows, err := w.Pool.Query(ctx, `SELECT DISTINCT org_id FROM api_keys UNION SELECT $1`, w.ExtraOrg)
	if err != nil {
		return 0, pg.Interpret(err)
	}
	orgs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, pg.Interpret(err)
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	var total int64
	for _, org := range orgs {
		err := pg.InOrgTx(ctx, w.Pool, org, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `DELETE FROM idempotency_keys WHERE org_id = $1 AND expires_at < $2`, org, now())
			total += tag.RowsAffected()
			return err
		})
		if err != nil {
			return total, pg.Interpret(err)
		}
	}
	return total, nil
}
