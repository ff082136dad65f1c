package queue

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/pg"
)

// Orgs lists the orgs background work visits: every org with an API key (every org that
// can write has one), plus extra (the bootstrap admin key's org) when it is not empty.
// Row-level security binds workers too, so each org then runs in its own pg.InOrgTx.
func Orgs(ctx context.Context, pool *pgxpool.Pool, extra string) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT DISTINCT org_id FROM api_keys UNION SELECT $1 WHERE $1 <> '' ORDER BY 1`, extra)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, pg.Interpret(err)
}

// InsertPerOrg fans a periodic job out: it inserts perOrg(org) for every org Orgs lists,
// each unique by its args for period, so replicas and overlapping schedules never queue
// one org's job twice in one period. It returns how many orgs it offered a job (River
// skips the duplicates). A worker passes river.ClientFromContext's client.
func InsertPerOrg[A river.JobArgs](ctx context.Context, client *Client, pool *pgxpool.Pool, extra string,
	period time.Duration, perOrg func(org string) A) (int, error) {
	orgs, err := Orgs(ctx, pool, extra)
	if err != nil || len(orgs) == 0 {
		return 0, err
	}
	opts := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: period}}
	params := make([]river.InsertManyParams, len(orgs))
	for i, o := range orgs {
		params[i] = river.InsertManyParams{Args: perOrg(o), InsertOpts: opts}
	}
	if _, err := client.InsertMany(ctx, params); err != nil {
		return 0, err
	}
	return len(orgs), nil
}
