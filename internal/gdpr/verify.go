package gdpr

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/working"
)

// Verification is the erasure's final re-query of every tier.
type Verification struct {
	Clean     bool             `json:"clean" doc:"True when every check found nothing left."`
	At        time.Time        `json:"at"`
	Remaining map[string]int64 `json:"remaining" doc:"What each check found for the subject after the erasure (all zero when clean): one per table with a user_id column, the subject's job tree, River jobs naming the subject, and the subject's sessions in Redis and Postgres."`
}

// Verify counts what is left of user in org, everywhere erasure reaches.
func Verify(ctx context.Context, pool *pgxpool.Pool, ws *working.Store, org, user string) (Verification, error) {
	v := Verification{Clean: true, At: time.Now().UTC(), Remaining: map[string]int64{}}
	err := pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		for _, c := range Covered {
			q := c.Remaining
			if q == "" {
				q = `SELECT count(*) FROM ` + c.Table + ` WHERE org_id = $1 AND user_id = $2`
			}
			var n int64
			if err := tx.QueryRow(ctx, q, org, user).Scan(&n); err != nil {
				return err
			}
			v.Remaining[c.Tier+"."+c.Table] = n
		}
		tree, err := subjectJobTree(ctx, tx, org, user)
		if err != nil {
			return err
		}
		v.Remaining["jobs.job_tree"] = int64(len(tree))
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind NOT LIKE 'gdpr\_%'
			AND jsonb_path_exists(args, '$.** ? (@ == $u)', jsonb_build_object('u', $2::text))
			AND jsonb_path_exists(args, '$.** ? (@ == $o)', jsonb_build_object('o', $1::text))`, org, user).Scan(&n); err != nil {
			return err
		}
		v.Remaining["river.river_job"] = n
		sessions, err := ws.SessionsOfUser(ctx, tx, org, user)
		if err != nil {
			return err
		}
		v.Remaining["working.redis_sessions"] = int64(len(sessions))
		return nil
	})
	if err != nil {
		return v, pg.Interpret(err)
	}
	for _, n := range v.Remaining {
		if n != 0 {
			v.Clean = false
		}
	}
	return v, nil
}
