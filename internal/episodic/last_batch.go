package episodic

import (
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
)

// viewWalkSQL is the view's segments as the CTE chain (job_id, lo, hi, depth) of job $2 in
// org $1, at most $3 forks deep, for a statement that reads over them: the job, then the
// jobs it was forked from, each up to the fork point. Each step reads the parent by key in
// a lateral subquery, as view does.
const viewWalkSQL = `WITH RECURSIVE chain AS (
		SELECT job_id, parent_job_id, coalesce(parent_seq, 0) AS lo, 9223372036854775807::bigint AS hi, 1 AS depth
		FROM episodic_jobs WHERE org_id = $1 AND job_id = $2
	UNION ALL
		SELECT j.job_id, j.parent_job_id, coalesce(j.parent_seq, 0), c.lo, c.depth + 1
		FROM chain c CROSS JOIN LATERAL (SELECT job_id, parent_job_id, parent_seq FROM episodic_jobs
			WHERE org_id = $1 AND job_id = c.parent_job_id OFFSET 0) j
		WHERE c.depth <= $3)`

// lastSQL is Last in one statement: the view's segments (viewWalkSQL) and the newest n ($4)
// events over them, newest first.
const lastSQL = viewWalkSQL + `
	SELECT ` + eventCols + `
	FROM chain c CROSS JOIN LATERAL (
		SELECT * FROM episodic_events e
		WHERE e.org_id = $1 AND e.job_id = c.job_id AND e.seq > c.lo AND e.seq <= c.hi
		ORDER BY e.seq DESC LIMIT $4) e
	ORDER BY c.depth, e.seq DESC
	LIMIT $4`

// headSQL is Head's query.
const headSQL = `SELECT job_id, last_seq, coalesce(parent_job_id, ''), coalesce(parent_seq, 0), created_at
	FROM episodic_jobs WHERE org_id = $1 AND job_id = $2`

// LastResult is filled in when the batch that QueueLast queued into is closed.
type LastResult struct {
	Events []Event // the view's last n events, oldest first (empty when the job has no log)
	Head   Head
	HasLog bool  // false when the job has no log yet (Head is zero)
	Err    error // a failure reading them
}

// QueueLast queues Last and Head for job into b, so a caller that already sends a batch
// (resume) reads the last events without round trips of their own. res is filled in as
// b's results are read.
func (s *Store) QueueLast(b *pgx.Batch, org, job string, n int, res *LastResult) {
	b.Queue(lastSQL, org, job, MaxForkDepth, n).Query(func(rows pgx.Rows) error {
		evs, err := collectEvents(rows, nil)
		if err != nil {
			res.Err = err
			return nil
		}
		slices.Reverse(evs)
		res.Events = evs
		return nil
	})
	b.Queue(headSQL, org, job).QueryRow(func(row pgx.Row) error {
		var h Head
		err := row.Scan(&h.JobID, &h.LastSeq, &h.ParentJobID, &h.ParentSeq, &h.CreatedAt)
		switch {
		case err == nil:
			h.CreatedAt = h.CreatedAt.UTC()
			res.Head, res.HasLog = h, true
		case err == pgx.ErrNoRows:
		default:
			if res.Err == nil {
				res.Err = pg.Interpret(err)
			}
		}
		return nil
	})
}
