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
	Attempts    int64 `json:"attempts"` // every attempt of every step (owner, input, error)
	Handoffs    int64 `json:"handoffs"`
	Outbox      int64 `json:"outbox"`
	LangGraph   int64 `json:"langgraph"` // LangGraph checkpoints, channel blobs and pending writes
}

// DeleteJob removes a job record with every checkpoint version, step (input and result),
// step attempt (input, error), handoff, outbox row, LangGraph checkpoint/blob/write, and the consolidation bookkeeping
// (job_consolidation, episodic_compactions) of the job (GDPR erasure, internal/gdpr). Forks reference their parent, so
// the caller deletes a job's forks first. A job that does not exist counts zero.
func DeleteJob(ctx context.Context, tx pgx.Tx, org, job string) (JobErasure, error) {
	var e JobErasure
	err := tx.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM job_checkpoints WHERE org_id = $1 AND job_id = $2),
			(SELECT count(*) FROM job_steps WHERE org_id = $1 AND job_id = $2),
			(SELECT count(*) FROM job_step_attempts WHERE org_id = $1 AND job_id = $2),
			(SELECT count(*) FROM job_handoffs WHERE org_id = $1 AND job_id = $2),
			(SELECT count(*) FROM langgraph_checkpoints WHERE org_id = $1 AND job_id = $2)
			+ (SELECT count(*) FROM langgraph_blobs WHERE org_id = $1 AND job_id = $2)
			+ (SELECT count(*) FROM langgraph_writes WHERE org_id = $1 AND job_id = $2)`, org, job).
		Scan(&e.Checkpoints, &e.Steps, &e.Attempts, &e.Handoffs, &e.LangGraph)
	if err != nil {
		return e, pg.Interpret(err)
	}
	tag, err := tx.Exec(ctx, `DELETE FROM job_outbox WHERE org_id = $1 AND job_id = $2`, org, job)
	if err != nil {
		return e, pg.Interpret(err)
	}
	e.Outbox = tag.RowsAffected()
	for _, q := range []string{`DELETE FROM job_consolidation WHERE org_id = $1 AND job_id = $2`,
		`DELETE FROM episodic_compactions WHERE org_id = $1 AND job_id = $2`} {
		if _, err := tx.Exec(ctx, q, org, job); err != nil {
			return e, pg.Interpret(err)
		}
	}
	// ON DELETE CASCADE takes checkpoints, steps (and their attempts) and handoffs with the job row.
	tag, err = tx.Exec(ctx, `DELETE FROM jobs WHERE org_id = $1 AND job_id = $2`, org, job)
	if err != nil {
		return e, pg.Interpret(err)
	}
	e.Jobs = tag.RowsAffected()
	if e.Jobs == 0 {
		e.Checkpoints, e.Steps, e.Attempts, e.Handoffs, e.LangGraph = 0, 0, 0, 0, 0
	}
	return e, nil
}

// RedactUserCheckpoints clears the checkpoint versions written for user in jobs that are
// not deleted whole (another subject's job): the state, working-state snapshot, goal and
// plan become empty and the row names no one; the version stays so the job's history keeps
// its numbering. It also deletes outbox rows and LangGraph rows that name the user.
func RedactUserCheckpoints(ctx context.Context, tx pgx.Tx, org, user string) (checkpoints, outbox, langgraph int64, err error) {
	tag, err := tx.Exec(ctx, `UPDATE job_checkpoints SET goal = '', current_step = '', done = '[]', pending = '[]',
			next_action = '', state = '{}', working_state = NULL, user_id = NULL, agent_id = NULL
		WHERE org_id = $1 AND user_id = $2`, org, user)
	if err != nil {
		return 0, 0, 0, pg.Interpret(err)
	}
	checkpoints = tag.RowsAffected()
	tag, err = tx.Exec(ctx, `DELETE FROM job_outbox WHERE org_id = $1 AND user_id = $2`, org, user)
	if err != nil {
		return checkpoints, 0, 0, pg.Interpret(err)
	}
	outbox = tag.RowsAffected()
	for _, q := range []string{`DELETE FROM langgraph_writes WHERE org_id = $1 AND user_id = $2`,
		`DELETE FROM langgraph_blobs WHERE org_id = $1 AND user_id = $2`,
		`DELETE FROM langgraph_checkpoints WHERE org_id = $1 AND user_id = $2`} {
		tag, err = tx.Exec(ctx, q, org, user)
		if err != nil {
			return checkpoints, outbox, langgraph, pg.Interpret(err)
		}
		langgraph += tag.RowsAffected()
	}
	return checkpoints, outbox, langgraph, nil
}
