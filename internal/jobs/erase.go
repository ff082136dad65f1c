package jobs

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
)

// JobErasure counts what DeleteJob removed.
type JobErasure struct {
	Jobs        int64 `json:"jobs"`
	Checkpoints int64 `json:"checkpoints"`
	Steps       int64 `json:"steps"`
	Handoffs    int64 `json:"handoffs"`
	Outbox      int64 `json:"outbox"`
}

// DeleteJob removes a job record with every checkpoint version, step (input and result),
// handoff and outbox row (GDPR erasure, internal/gdpr). Forks reference their parent, so
// the caller deletes a job's forks first. A job that does not exist counts zero.
func DeleteJob(ctx context.Context, tx pgx.Tx, org, job string) (JobErasure, error) {
	var e JobErasure
	err := tx.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM job_checkpoints WHERE org_id = $1 AND job_id = $2),
			(SELECT count(*) FROM job_steps WHERE org_id = $1 AND job_id = $2),
			(SELECT count(*) FROM job_handoffs WHERE org_id = $1 AND job_id = $2)`, org, job).
		Scan(&e.Checkpoints, &e.Steps, &e.Handoffs)
	if err != nil {
		return e, pg.Interpret(err)
	}
	tag, err := tx.Exec(ctx, `DELETE FROM job_outbox WHERE org_id = $1 AND job_id = $2`, org, job)
	if err != nil {
		return e, pg.Interpret(err)
	}
	e.Outbox = tag.RowsAffected()
	// ON DELETE CASCADE takes checkpoints, steps and handoffs with the job row.
	tag, err = tx.Exec(ctx, `DELETE FROM jobs WHERE org_id = $1 AND job_id = $2`, org, job)
	if err != nil {
		return e, pg.Interpret(err)
	}
	e.Jobs = tag.RowsAffected()
	if e.Jobs == 0 {
		e.Checkpoints, e.Steps, e.Handoffs = 0, 0, 0
	}
	return e, nil
}

// RedactUserCheckpoints clears the checkpoint versions written for user in jobs that are
// not deleted whole (another subject's job): the state, working-state snapshot, goal and
// plan become empty and the row names no one; the version stays so the job's history keeps
// its numbering. It also deletes outbox rows that name the user.
func RedactUserCheckpoints(ctx context.Context, tx pgx.Tx, org, user string) (checkpoints, outbox int64, err error) {
	tag, err := tx.Exec(ctx, `UPDATE job_checkpoints SET goal = '', current_step = '', done = '[]', pending = '[]',
			next_action = '', state = '{}', working_state = NULL, user_id = NULL, agent_id = NULL
		WHERE org_id = $1 AND user_id = $2`, org, user)
	if err != nil {
		return 0, 0, pg.Interpret(err)
	}
	checkpoints = tag.RowsAffected()
	tag, err = tx.Exec(ctx, `DELETE FROM job_outbox WHERE org_id = $1 AND user_id = $2`, org, user)
	if err != nil {
		return checkpoints, 0, pg.Interpret(err)
	}
	return checkpoints, tag.RowsAffected(), nil
}
