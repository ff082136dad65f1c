package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Job statuses.
const (
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// OutboxKindConsolidate is the outbox kind a finished job enqueues (see migrations/0004).
const OutboxKindConsolidate = "consolidate_job"

// ValidStatus reports whether s is a job status.
func ValidStatus(s string) bool {
	return s == StatusRunning || s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Terminal reports whether a job status is final.
func Terminal(s string) bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Job is a job record.
type Job struct {
	JobID             string          `json:"job_id"`
	Version           int64           `json:"version" doc:"The job record's version (ETag); checkpoints have their own."`
	Goal              string          `json:"goal"`
	Status            string          `json:"status" enum:"running,completed,failed,cancelled"`
	Owner             string          `json:"owner,omitempty" doc:"The agent that owns the job; moved only by an acknowledged handoff."`
	UserID            string          `json:"user_id,omitempty"`
	AgentID           string          `json:"agent_id,omitempty"`
	SessionID         string          `json:"session_id,omitempty"`
	Metadata          json.RawMessage `json:"metadata"`
	Outcome           json.RawMessage `json:"outcome,omitempty"`
	CheckpointVersion int64           `json:"checkpoint_version" doc:"Latest checkpoint version (0: none yet)."`
	ParentJobID       string          `json:"parent_job_id,omitempty" doc:"For a fork: the job it branched from."`
	ParentVersion     int64           `json:"parent_version,omitempty" doc:"For a fork: the parent's checkpoint version it branched at."`
	ParentEventSeq    int64           `json:"parent_event_seq,omitempty" doc:"For a fork: the parent's event seq at that checkpoint; the fork shares events up to it."`
	ProgressAt        time.Time       `json:"progress_at" doc:"Last step start, heartbeat, completion, failure, checkpoint or handoff ack."`
	CreatedAt         time.Time       `json:"created_at"`
	UpdatedAt         time.Time       `json:"updated_at"`
	FinishedAt        *time.Time      `json:"finished_at,omitempty"`
}

// JobSpec is what PUT /v1/jobs/{job} sets.
type JobSpec struct {
	Goal      string
	Status    string // "" keeps the current status (running on create)
	Owner     string // set on create; on update "" keeps it and another value is refused
	UserID    string
	AgentID   string
	SessionID string
	Metadata  json.RawMessage // nil: {}
	Outcome   json.RawMessage // only with a terminal status
	EventSeq  int64           // the job's episodic last seq, for the outbox payload
}

// Store is the jobs tier. It holds no connection: every method takes the caller's DBTX.
type Store struct {
	now func() time.Time
	// StalledAfter is how long a running job may go without progress before it counts as
	// stalled (config STRATA_STALLED_AFTER).
	StalledAfter time.Duration
}

// NewStore returns a store that counts a running job as stalled after stalledAfter without
// progress (0: 15 minutes), on the given clock (nil: time.Now).
func NewStore(stalledAfter time.Duration, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	if stalledAfter <= 0 {
		stalledAfter = 15 * time.Minute
	}
	return &Store{now: now, StalledAfter: stalledAfter}
}

// Now is the store's clock, UTC, at the database's microsecond precision.
func (s *Store) Now() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// jobColsT lists a job's columns; {t} is a table alias prefix.
const jobColsT = `{t}job_id, {t}version, {t}goal, {t}status, {t}owner, coalesce({t}user_id, ''), coalesce({t}agent_id, ''),
	coalesce({t}session_id, ''), {t}metadata, {t}outcome, {t}checkpoint_version, coalesce({t}parent_job_id, ''),
	coalesce({t}parent_version, 0), coalesce({t}parent_event_seq, 0), {t}progress_at, {t}created_at, {t}updated_at, {t}finished_at`

var jobCols = strings.ReplaceAll(jobColsT, "{t}", "")

// jobColsOf is jobCols qualified by a table alias ("j.").
func jobColsOf(alias string) string { return strings.ReplaceAll(jobColsT, "{t}", alias) }

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func quoteOr(s, empty string) string {
	if s == "" {
		return empty
	}
	return strconv.Quote(s)
}

func scanJob(row pgx.Row) (Job, error) {
	var j Job
	err := row.Scan(&j.JobID, &j.Version, &j.Goal, &j.Status, &j.Owner, &j.UserID, &j.AgentID, &j.SessionID,
		&j.Metadata, &j.Outcome, &j.CheckpointVersion, &j.ParentJobID, &j.ParentVersion, &j.ParentEventSeq,
		&j.ProgressAt, &j.CreatedAt, &j.UpdatedAt, &j.FinishedAt)
	if err != nil {
		return Job{}, pg.Interpret(err)
	}
	j.ProgressAt, j.CreatedAt, j.UpdatedAt = j.ProgressAt.UTC(), j.CreatedAt.UTC(), j.UpdatedAt.UTC()
	if j.FinishedAt != nil {
		t := j.FinishedAt.UTC()
		j.FinishedAt = &t
	}
	return j, nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func orEmpty(raw json.RawMessage, empty string) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage(empty)
	}
	return raw
}

// jsonOrNull is raw for a jsonb parameter: nil (SQL NULL) when absent.
func jsonOrNull(raw json.RawMessage) any {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	return string(raw)
}

// GetJob reads a job.
func (s *Store) GetJob(ctx context.Context, db pg.DBTX, org, jobID string) (Job, error) {
	return scanJob(db.QueryRow(ctx, `SELECT `+jobCols+` FROM jobs WHERE org_id = $1 AND job_id = $2`, org, jobID))
}

// lockJob reads a job and locks its row until the transaction ends.
func (s *Store) lockJob(ctx context.Context, db pg.DBTX, org, jobID string) (Job, error) {
	return scanJob(db.QueryRow(ctx, lockJobSQL, org, jobID))
}

func notRunning(j Job) error {
	return strata.Conflict("job "+j.JobID+" is "+j.Status+"; fork it from a checkpoint to continue",
		map[string]any{"job_id": j.JobID, "status": j.Status})
}

// Check refuses a spec the jobs table cannot hold: a goal with NUL characters, metadata or
// outcome JSON with \u0000, metadata that is not an object, an unknown status. PutJob runs it
// first; a caller that reads another store before PutJob runs it before that read, so bad
// input costs no round trip.
func (spec JobSpec) Check() error {
	if err := strata.CheckText("goal", spec.Goal); err != nil {
		return err
	}
	if err := strata.CheckJSON("metadata", spec.Metadata); err != nil {
		return err
	}
	if err := strata.CheckJSON("outcome", spec.Outcome); err != nil {
		return err
	}
	if len(spec.Metadata) > 0 && spec.Metadata[0] != '{' {
		return strata.Invalid("metadata", "must be a JSON object")
	}
	if spec.Status != "" && !ValidStatus(spec.Status) {
		return strata.Invalid("status", "must be running, completed, failed or cancelled")
	}
	return nil
}

// PutJob creates or updates a job. ifMatch (when set) must equal the current record
// version (0 means "must not exist yet"). created reports an insert. An update that
// changes nothing keeps the version. Moving a running job to a terminal status finishes it
// as CompleteJob does (outbox row included); a finished job's status cannot change again.
func (s *Store) PutJob(ctx context.Context, db pg.DBTX, org, jobID string, spec JobSpec, ifMatch *int64) (Job, bool, error) {
	if err := spec.Check(); err != nil {
		return Job{}, false, err
	}
	now := s.Now()
	cur, err := s.lockJob(ctx, db, org, jobID)
	if errors.Is(err, strata.ErrNotFound) {
		if ifMatch != nil && *ifMatch != 0 {
			return Job{}, false, strata.Conflict("job "+jobID+" does not exist (If-Match names version "+itoa(*ifMatch)+")",
				map[string]any{"current_version": 0})
		}
		status := spec.Status
		if status == "" {
			status = StatusRunning
		}
		var finished any
		if Terminal(status) {
			finished = now
		}
		j, err := scanJob(db.QueryRow(ctx, `INSERT INTO jobs (org_id, job_id, goal, status, owner, user_id, agent_id,
			session_id, metadata, outcome, progress_at, created_at, updated_at, finished_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb, $11, $11, $11, $12)
			ON CONFLICT (org_id, job_id) DO NOTHING
			RETURNING `+jobCols,
			org, jobID, spec.Goal, status, spec.Owner, nullable(spec.UserID), nullable(spec.AgentID), nullable(spec.SessionID),
			string(orEmpty(spec.Metadata, "{}")), jsonOrNull(spec.Outcome), now, finished))
		if errors.Is(err, strata.ErrNotFound) {
			// Created concurrently by another request: answer as an update would.
			return Job{}, false, strata.Conflict("job "+jobID+" was created concurrently; retry", nil)
		}
		if err != nil {
			return Job{}, false, err
		}
		if Terminal(status) {
			if err := s.enqueue(ctx, db, org, j, spec.EventSeq, now); err != nil {
				return Job{}, false, err
			}
		}
		return j, true, nil
	}
	if err != nil {
		return Job{}, false, err
	}
	if ifMatch != nil && *ifMatch != cur.Version {
		return Job{}, false, strata.Conflict("job "+jobID+" is at version "+itoa(cur.Version)+", not "+itoa(*ifMatch),
			map[string]any{"current_version": cur.Version})
	}
	if spec.Owner != "" && spec.Owner != cur.Owner {
		return Job{}, false, strata.Conflict("job "+jobID+" is owned by "+quoteOr(cur.Owner, "nobody")+"; ownership moves only by an acknowledged handoff",
			map[string]any{"owner": cur.Owner})
	}
	status := spec.Status
	if status == "" {
		status = cur.Status
	}
	if status != cur.Status && Terminal(cur.Status) {
		return Job{}, false, notRunning(cur)
	}
	finishing := Terminal(status) && !Terminal(cur.Status)
	var finished any
	if finishing {
		finished = now
	} else if cur.FinishedAt != nil {
		finished = *cur.FinishedAt
	}
	outcome := jsonOrNull(spec.Outcome)
	if outcome == nil && cur.Outcome != nil {
		outcome = string(cur.Outcome)
	}
	j, err := scanJob(db.QueryRow(ctx, `UPDATE jobs SET version = version + 1, goal = $3, status = $4, user_id = $5,
			agent_id = $6, session_id = $7, metadata = $8::jsonb, outcome = $9::jsonb, updated_at = $10, finished_at = $11
		WHERE org_id = $1 AND job_id = $2
		  AND (goal, status, user_id, agent_id, session_id, metadata, outcome)
		      IS DISTINCT FROM ($3, $4, $5, $6, $7, $8::jsonb, $9::jsonb)
		RETURNING `+jobCols,
		org, jobID, spec.Goal, status, nullable(spec.UserID), nullable(spec.AgentID), nullable(spec.SessionID),
		string(orEmpty(spec.Metadata, "{}")), outcome, now, finished))
	if errors.Is(err, strata.ErrNotFound) {
		return cur, false, nil // nothing changed
	}
	if err != nil {
		return Job{}, false, err
	}
	if finishing {
		if err := s.enqueue(ctx, db, org, j, spec.EventSeq, now); err != nil {
			return Job{}, false, err
		}
	}
	return j, false, nil
}

// CheckCompletion refuses a completion CompleteJob would refuse without reading the job:
// outcome JSON with \u0000, a status that is not terminal ("" is completed). CompleteJob
// runs it first; a caller that reads another store before CompleteJob runs it before that
// read.
func CheckCompletion(status string, outcome json.RawMessage) error {
	if err := strata.CheckJSON("outcome", outcome); err != nil {
		return err
	}
	if status != "" && !Terminal(status) {
		return strata.Invalid("status", "must be completed, failed or cancelled")
	}
	return nil
}

// CompleteJob finishes a running job with status (completed, failed or cancelled) and
// outcome, and in the same transaction enqueues its consolidation in job_outbox. Finishing
// it again with the same status answers the job as it is (no second outbox row).
func (s *Store) CompleteJob(ctx context.Context, db pg.DBTX, org, jobID, status string, outcome json.RawMessage, eventSeq int64) (Job, error) {
	if err := CheckCompletion(status, outcome); err != nil {
		return Job{}, err
	}
	if status == "" {
		status = StatusCompleted
	}
	cur, err := s.lockJob(ctx, db, org, jobID)
	if err != nil {
		return Job{}, err
	}
	if cur.Status == status {
		return cur, nil
	}
	if Terminal(cur.Status) {
		return Job{}, notRunning(cur)
	}
	now := s.Now()
	j, err := scanJob(db.QueryRow(ctx, `UPDATE jobs SET version = version + 1, status = $3, outcome = $4::jsonb,
			updated_at = $5, finished_at = $5, progress_at = $5
		WHERE org_id = $1 AND job_id = $2 RETURNING `+jobCols,
		org, jobID, status, jsonOrNull(outcome), now))
	if err != nil {
		return Job{}, err
	}
	return j, s.enqueue(ctx, db, org, j, eventSeq, now)
}

// OutboxPayload is the payload of a consolidate_job outbox row: the contract with the
// workers tier.
type OutboxPayload struct {
	JobID             string          `json:"job_id"`
	Status            string          `json:"status"`
	Outcome           json.RawMessage `json:"outcome,omitempty"`
	CheckpointVersion int64           `json:"checkpoint_version"`
	EventSeq          int64           `json:"event_seq"`
	FinishedAt        time.Time       `json:"finished_at"`
}

// OutboxRow is one row of job_outbox.
type OutboxRow struct {
	ID          int64
	JobID       string
	Kind        string
	Payload     OutboxPayload
	CreatedAt   time.Time
	ProcessedAt *time.Time
}

func (s *Store) enqueue(ctx context.Context, db pg.DBTX, org string, j Job, eventSeq int64, now time.Time) error {
	p, err := json.Marshal(OutboxPayload{JobID: j.JobID, Status: j.Status, Outcome: j.Outcome,
		CheckpointVersion: j.CheckpointVersion, EventSeq: eventSeq, FinishedAt: now})
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, `INSERT INTO job_outbox (org_id, job_id, kind, payload, user_id, created_at)
		VALUES ($1, $2, $3, $4::jsonb, $5, $6) ON CONFLICT (org_id, job_id, kind) DO NOTHING`,
		org, j.JobID, OutboxKindConsolidate, string(p), nullable(j.UserID), now)
	return pg.Interpret(err)
}

// Outbox lists a job's outbox rows (for tests and operators).
func (s *Store) Outbox(ctx context.Context, db pg.DBTX, org, jobID string) ([]OutboxRow, error) {
	rows, err := db.Query(ctx, `SELECT id, job_id, kind, payload, created_at, processed_at FROM job_outbox
		WHERE org_id = $1 AND job_id = $2 ORDER BY id`, org, jobID)
	if err != nil {
		return nil, pg.Interpret(err)
	}
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

// ListFilter selects jobs for GET /v1/jobs.
type ListFilter struct {
	Status  string // "" any
	Stalled bool   // only running jobs whose in-flight lease expired or that made no progress for StalledAfter
	After   string // job_id cursor (a next_cursor of the previous page)
	Parent  string // "" any; else only jobs forked from this job (its direct forks), by the jobs_forks index
	Limit   int    // rows to return (callers ask limit+1 to detect a next page)
}

// StalledStep is where a stalled job stalled.
type StalledStep struct {
	Reason         string          `json:"reason" enum:"lease_expired,no_progress" doc:"lease_expired: an in-flight step's lease ran out; no_progress: nothing happened for STRATA_STALLED_AFTER."`
	StepID         string          `json:"step_id,omitempty"`
	Status         string          `json:"status,omitempty"`
	Owner          string          `json:"owner,omitempty"`
	FencingToken   int64           `json:"fencing_token,omitempty"`
	Attempts       int             `json:"attempts,omitempty"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	Input          json.RawMessage `json:"input,omitempty" doc:"The step's recorded input (tool, model, params)."`
	Error          string          `json:"error,omitempty"`
	StalledFor     string          `json:"stalled_for" doc:"How long since the lease expired or since the last progress (Go duration)."`
}

// JobListItem is a job in a list, with where it stalled when the list asks for stalled jobs.
type JobListItem struct {
	Job
	Stalled *StalledStep `json:"stalled,omitempty"`
}

// ListJobs lists jobs by job_id. A cursor that is not a job id is a FieldError for "cursor".
func (s *Store) ListJobs(ctx context.Context, db pg.DBTX, org string, f ListFilter) ([]JobListItem, error) {
	if err := strata.CheckID("cursor", f.After, true); err != nil {
		return nil, err
	}
	if err := strata.CheckID("parent_job_id", f.Parent, true); err != nil {
		return nil, err
	}
	if f.Limit <= 0 {
		f.Limit = 101
	}
	if f.Stalled {
		return s.listStalled(ctx, db, org, f)
	}
	q := `SELECT ` + jobCols + ` FROM jobs
		WHERE org_id = $1 AND ($2 = '' OR status = $2) AND job_id > $3 ORDER BY job_id LIMIT $4`
	args := []any{org, f.Status, f.After, f.Limit}
	if f.Parent != "" {
		// A statement of its own, so its plan (generic or not) reads the partial index
		// jobs_forks (org_id, parent_job_id, job_id) instead of every job of the org.
		q = `SELECT ` + jobCols + ` FROM jobs
			WHERE org_id = $1 AND parent_job_id = $5 AND ($2 = '' OR status = $2) AND job_id > $3 ORDER BY job_id LIMIT $4`
		args = append(args, f.Parent)
	}
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	defer rows.Close()
	var out []JobListItem
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, JobListItem{Job: j})
	}
	return out, pg.Interpret(rows.Err())
}

func (s *Store) listStalled(ctx context.Context, db pg.DBTX, org string, f ListFilter) ([]JobListItem, error) {
	if f.Status != "" && f.Status != StatusRunning {
		return nil, nil // only running jobs stall
	}
	now := s.Now()
	quiet := now.Add(-s.StalledAfter)
	// For each running job, the step that matters: the in-flight step whose lease runs out
	// first, else the step touched last.
	rows, err := db.Query(ctx, `SELECT `+jobColsOf("j.")+`,
			coalesce(st.step_id, ''), coalesce(st.status, ''), coalesce(st.owner, ''), coalesce(st.fencing_token, 0),
			coalesce(st.attempts, 0), st.lease_expires_at, st.input, coalesce(st.error, '')
		FROM jobs j
		LEFT JOIN LATERAL (
			SELECT s.step_id, s.status, s.owner, s.fencing_token, s.attempts, s.lease_expires_at, s.input, s.error
			FROM job_steps s WHERE s.org_id = j.org_id AND s.job_id = j.job_id
			ORDER BY (s.status = 'running') DESC,
			         CASE WHEN s.status = 'running' THEN s.lease_expires_at END ASC,
			         s.heartbeat_at DESC
			LIMIT 1) st ON true
		WHERE j.org_id = $1 AND j.status = 'running' AND j.job_id > $2
		  AND ((st.status = 'running' AND st.lease_expires_at < $3) OR j.progress_at < $4)
		  AND ($6 = '' OR j.parent_job_id = $6)
		ORDER BY j.job_id LIMIT $5`, org, f.After, now, quiet, f.Limit, f.Parent)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	defer rows.Close()
	var out []JobListItem
	for rows.Next() {
		var j Job
		var st StalledStep
		err := rows.Scan(&j.JobID, &j.Version, &j.Goal, &j.Status, &j.Owner, &j.UserID, &j.AgentID, &j.SessionID,
			&j.Metadata, &j.Outcome, &j.CheckpointVersion, &j.ParentJobID, &j.ParentVersion, &j.ParentEventSeq,
			&j.ProgressAt, &j.CreatedAt, &j.UpdatedAt, &j.FinishedAt,
			&st.StepID, &st.Status, &st.Owner, &st.FencingToken, &st.Attempts, &st.LeaseExpiresAt, &st.Input, &st.Error)
		if err != nil {
			return nil, pg.Interpret(err)
		}
		j.ProgressAt, j.CreatedAt, j.UpdatedAt = j.ProgressAt.UTC(), j.CreatedAt.UTC(), j.UpdatedAt.UTC()
		if st.Status == StepRunning && st.LeaseExpiresAt != nil && st.LeaseExpiresAt.Before(now) {
			st.Reason = "lease_expired"
			st.StalledFor = now.Sub(*st.LeaseExpiresAt).Round(time.Millisecond).String()
		} else {
			st.Reason = "no_progress"
			st.StalledFor = now.Sub(j.ProgressAt).Round(time.Millisecond).String()
		}
		if st.LeaseExpiresAt != nil {
			t := st.LeaseExpiresAt.UTC()
			st.LeaseExpiresAt = &t
		}
		out = append(out, JobListItem{Job: j, Stalled: &st})
	}
	return out, pg.Interpret(rows.Err())
}

// StalledCounts counts stalled jobs across every org (for the metric): jobs with an expired
// in-flight lease, and other running jobs without progress for StalledAfter. db may be the
// pool: the SQL function runs as the schema owner and returns counts only.
func (s *Store) StalledCounts(ctx context.Context, db pg.DBTX) (leaseExpired, noProgress int64, err error) {
	err = db.QueryRow(ctx, `SELECT lease_expired, no_progress FROM jobs_stalled_counts($1, $2)`,
		s.Now(), s.StalledAfter).Scan(&leaseExpired, &noProgress)
	return leaseExpired, noProgress, pg.Interpret(err)
}

// Users answers the data subject of each of the given jobs that exists (job id → user id,
// "" for none): background work names it in its queued args, so an erasure finds them.
func (s *Store) Users(ctx context.Context, q pg.DBTX, org string, jobIDs []string) (map[string]string, error) {
	rows, err := q.Query(ctx, `SELECT job_id, coalesce(user_id, '') FROM jobs WHERE org_id = $1 AND job_id = ANY($2)`, org, jobIDs)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var j, u string
		if err := rows.Scan(&j, &u); err != nil {
			return nil, pg.Interpret(err)
		}
		out[j] = u
	}
	return out, pg.Interpret(rows.Err())
}
