package jobs

// For the consolidation and eviction workers: the outbox consumer's side of the contract
// (claim, mark processed, record a failure), finished jobs by age, and checkpoint pruning.

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
)

// PendingOutbox lists org's unprocessed outbox rows of kind with fewer than maxAttempts
// failed attempts, oldest first. It takes no locks (a dispatcher only needs to know them).
func (s *Store) PendingOutbox(ctx context.Context, q pg.DBTX, org, kind string, maxAttempts, limit int) ([]OutboxRow, error) {
	rows, err := q.Query(ctx, `SELECT id, job_id, kind, payload, created_at, processed_at FROM job_outbox
		WHERE org_id = $1 AND kind = $2 AND processed_at IS NULL AND attempts < $3 ORDER BY id LIMIT $4`,
		org, kind, maxAttempts, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	return collectOutbox(rows)
}

func collectOutbox(rows pgx.Rows) ([]OutboxRow, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxRow, error) {
		var o OutboxRow
		var p []byte
		if err := r.Scan(&o.ID, &o.JobID, &o.Kind, &p, &o.CreatedAt, &o.ProcessedAt); err != nil {
			return o, err
		}
		return o, json.Unmarshal(p, &o.Payload)
	})
	return out, pg.Interpret(err)
}

// ClaimOutbox locks the unprocessed outbox row of (job, kind) until tx ends. With
// skipLocked a row another consumer holds is not waited for. ok is false when there is no
// unprocessed row (already processed, never enqueued, or held by another consumer).
func (s *Store) ClaimOutbox(ctx context.Context, tx pgx.Tx, org, jobID, kind string, skipLocked bool) (OutboxRow, bool, error) {
	lock := "FOR UPDATE"
	if skipLocked {
		lock = "FOR UPDATE SKIP LOCKED"
	}
	rows, err := tx.Query(ctx, `SELECT id, job_id, kind, payload, created_at, processed_at FROM job_outbox
		WHERE org_id = $1 AND job_id = $2 AND kind = $3 AND processed_at IS NULL `+lock, org, jobID, kind)
	if err != nil {
		return OutboxRow{}, false, pg.Interpret(err)
	}
	got, err := collectOutbox(rows)
	if err != nil || len(got) == 0 {
		return OutboxRow{}, false, err
	}
	return got[0], true, nil
}

// MarkOutboxProcessed records that the consumer did the work of row id.
func (s *Store) MarkOutboxProcessed(ctx context.Context, tx pg.DBTX, org string, id int64, now time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE job_outbox SET processed_at = $3 WHERE org_id = $1 AND id = $2`, org, id, now)
	return pg.Interpret(err)
}

// RecordOutboxFailure counts a failed attempt on (job, kind) with its error.
func (s *Store) RecordOutboxFailure(ctx context.Context, tx pg.DBTX, org, jobID, kind, msg string) error {
	if len(msg) > 2000 {
		msg = msg[:2000]
	}
	_, err := tx.Exec(ctx, `UPDATE job_outbox SET attempts = attempts + 1, last_error = $4
		WHERE org_id = $1 AND job_id = $2 AND kind = $3 AND processed_at IS NULL`, org, jobID, kind, msg)
	return pg.Interpret(err)
}

// OutboxDone reports whether job has no unprocessed outbox row (its consolidation ran, or
// it never enqueued any).
func (s *Store) OutboxDone(ctx context.Context, q pg.DBTX, org, jobID string) (bool, error) {
	var pending bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM job_outbox WHERE org_id = $1 AND job_id = $2 AND processed_at IS NULL)`,
		org, jobID).Scan(&pending)
	return !pending, pg.Interpret(err)
}

// FinishedJob is a job in a terminal status.
type FinishedJob struct {
	JobID      string
	Status     string
	FinishedAt time.Time
}

// FinishedBefore lists org's jobs finished (completed, failed, cancelled) before cutoff,
// oldest first, after the cursor job id when finished at the same time.
func (s *Store) FinishedBefore(ctx context.Context, q pg.DBTX, org string, cutoff time.Time, limit int) ([]FinishedJob, error) {
	rows, err := q.Query(ctx, `SELECT job_id, status, finished_at FROM jobs
		WHERE org_id = $1 AND status <> 'running' AND finished_at < $2 ORDER BY finished_at, job_id LIMIT $3`, org, cutoff, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FinishedJob, error) {
		var j FinishedJob
		err := r.Scan(&j.JobID, &j.Status, &j.FinishedAt)
		j.FinishedAt = j.FinishedAt.UTC()
		return j, err
	})
	return out, pg.Interpret(err)
}

// CheckpointRef names one checkpoint version.
type CheckpointRef struct {
	JobID   string
	Version int64
}

// SurplusCheckpoints lists checkpoint versions beyond the newest keep stored versions of
// each job, oldest first, sparing any version a fork branched from (the fork reads it)
// and the jobs of restricted data subjects (GDPR Art. 18).
func (s *Store) SurplusCheckpoints(ctx context.Context, q pg.DBTX, org string, keep, limit int) ([]CheckpointRef, error) {
	if keep <= 0 {
		return nil, errors.New("jobs: keep must be positive")
	}
	rows, err := q.Query(ctx, `SELECT c.job_id, c.version FROM (
			SELECT job_id, version, row_number() OVER (PARTITION BY job_id ORDER BY version DESC) AS rn
			FROM job_checkpoints WHERE org_id = $1) c
		WHERE c.rn > $2
		  AND NOT EXISTS (SELECT 1 FROM jobs rj JOIN gdpr_restrictions r ON r.org_id = rj.org_id AND r.user_id = rj.user_id WHERE rj.org_id = $1 AND rj.job_id = c.job_id)
		  AND NOT EXISTS (SELECT 1 FROM jobs f WHERE f.org_id = $1 AND f.parent_job_id = c.job_id AND f.parent_version = c.version)
		ORDER BY c.job_id, c.version LIMIT $3`, org, keep, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CheckpointRef, error) {
		var c CheckpointRef
		err := r.Scan(&c.JobID, &c.Version)
		return c, err
	})
	return out, pg.Interpret(err)
}

// DeleteCheckpoints removes the given checkpoint versions (never a job's latest, nor one
// a fork branched from) and returns how many went.
func (s *Store) DeleteCheckpoints(ctx context.Context, tx pg.DBTX, org string, refs []CheckpointRef) (int64, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	jobs, versions := make([]string, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		jobs[i], versions[i] = r.JobID, r.Version
	}
	tag, err := tx.Exec(ctx, `DELETE FROM job_checkpoints c USING unnest($2::text[], $3::bigint[]) AS u(job_id, version)
		WHERE c.org_id = $1 AND c.job_id = u.job_id AND c.version = u.version
		  AND c.version < (SELECT j.checkpoint_version FROM jobs j WHERE j.org_id = $1 AND j.job_id = c.job_id)
		  AND NOT EXISTS (SELECT 1 FROM jobs f WHERE f.org_id = $1 AND f.parent_job_id = c.job_id AND f.parent_version = c.version)`,
		org, jobs, versions)
	return tag.RowsAffected(), pg.Interpret(err)
}

// RetainableLogs lists org's jobs finished before cutoff whose episodic log still holds
// events, whose consolidation has run (no unprocessed outbox row) and whose log no fork
// reads, and whose data subject is not restricted (GDPR Art. 18): what episodic retention
// may delete, oldest first. (The jobs tier shares the key
// (org_id, job_id) with the episodic log, so it joins it here.)
func (s *Store) RetainableLogs(ctx context.Context, q pg.DBTX, org string, cutoff time.Time, limit int) ([]FinishedJob, error) {
	rows, err := q.Query(ctx, `SELECT j.job_id, j.status, j.finished_at FROM jobs j
		WHERE j.org_id = $1 AND j.status <> 'running' AND j.finished_at < $2
		  AND NOT EXISTS (SELECT 1 FROM gdpr_restrictions r WHERE r.org_id = j.org_id AND r.user_id = j.user_id)
		  AND EXISTS (SELECT 1 FROM episodic_events e WHERE e.org_id = j.org_id AND e.job_id = j.job_id)
		  AND NOT EXISTS (SELECT 1 FROM job_outbox o WHERE o.org_id = j.org_id AND o.job_id = j.job_id AND o.processed_at IS NULL)
		  AND NOT EXISTS (SELECT 1 FROM episodic_jobs c WHERE c.org_id = j.org_id AND c.parent_job_id = j.job_id)
		ORDER BY j.finished_at, j.job_id LIMIT $3`, org, cutoff, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FinishedJob, error) {
		var j FinishedJob
		err := r.Scan(&j.JobID, &j.Status, &j.FinishedAt)
		j.FinishedAt = j.FinishedAt.UTC()
		return j, err
	})
	return out, pg.Interpret(err)
}
